"""The judge's audit hook inside the execution child, and the other hook registries it checks.

THREAT MODEL. Candidate code shares this process with the harness. Two ways it could change what the harness
measures without patching a watched object (issue 25): run inside the harness's own steps (an audit hook fired
by the child's own /proc listing, a gc callback, a signal handler, ...), doing its work while a batch is armed
or after the batch's last event; or edit the harness's state in place, reaching a harness frame (the timing
loop's locals, the child's instance) or any object through the garbage collector. This module is the judge's
answer inside the process:

- `install` adds one audit hook (sys.addaudithook), before the candidate is imported and before `Integrity`
  takes its snapshots. Audit hooks cannot be removed from Python, and this one refuses every later one: the
  `sys.addaudithook` event raising RuntimeError makes CPython drop the new hook, from Python and from C
  (`PySys_AddAuditHook`) alike. It also refuses `sys.settrace` / `sys.setprofile` (the C API's
  `PyEval_SetTrace` / `PyEval_SetProfile` raise the same events) and `ctypes` lookups of the interpreter's
  own C API (`PyFrame_LocalsToFast` writes a frame's locals) unless the judge or torch asks.
- It records, in its own closure, every time code that is not trusted takes a frame (`sys._getframe`,
  `sys._current_frames`, a traceback's, generator's or coroutine's frame), walks the garbage collector
  (`gc.get_objects`, `get_referrers`, `get_referents`), or replaces a function's code or defaults. Any frame
  reaches the harness's through `f_back`, which raises no event: so the first frame is what counts, not which.
- Who asked: the first frame above the event that is not a frame-returning helper (`inspect.currentframe`,
  `inspect.stack`, `traceback.walk_stack`, ...), nor a frame a library made to hand to its caller: a bare
  `_getframe()` evaluated by trusted library code, as tvm-ffi (TileLang's runtime) makes one per line of a C++
  backtrace when a call raises. Then that library function is a helper too, and its caller is who asked. It is
  trusted when its code is a module of the standard library, of site-packages or of the judge, named in
  `sys.modules` with that very module dict as its globals (torch, logging and warnings take frames of their own
  all the time).
- Code under a trusted module's file name would pass as that module's (`trusted` reads `co_filename`, which
  whoever makes the code chooses): compiled into a library module's namespace (`exec(compile(text, os.__file__,
  "exec"), vars(os))`), a code object copied with that name (`code.replace(co_filename=...)`), read from bytes
  (`marshal.loads`), or a compiled `.pyc` written and imported. The hook refuses each where the candidate asks
  (codeop, py_compile, compileall, code and importlib's `source_to_code` are looked through to their caller), a
  `.pyc` opened outside `__pycache__` and the library's directories, a zip archive's compiled module under such a
  name, and an import whose compiled text is not the file it names.
- The harness reads the record through a private event (`findings`), with a fresh token the hook echoes:
  a hook that no longer answers is itself a finding. Nothing in Python holds the hook or its closure; the
  garbage collector would find them, and walking it is recorded first.
- `seal` hands the hook a harness instance (the child, its clock, `Integrity`): the hook keeps a copy of its
  attributes where frames cannot reach, and `findings` reports any attribute replaced, added, or hiding a method.
- `HookBaseline` and `active_hooks` (sandbox/child/hook_registries.py): the registries through which candidate
  code would run inside a harness step without an audit event (gc callbacks, signal handlers and interval timers,
  sys.monitoring tools, threading's trace and profile functions, the unraisable hook, torch modes and saved-tensor
  hooks), checked against what the judge itself had before the import, at every reply and (the quick ones) at the
  end of every timed batch.

What it cannot do: code that is native (a C++ extension) can reach anything in the process, remove the hook
from the interpreter's list, or forge the child's replies; trusted library code that hands a caller a frame's
contents (torch.jit's resolution callbacks built from a caller's frame) passes as trusted, and so would a
third-party library that compiles text its caller chooses under a library file name its caller chooses. The
parent's bounds on time (its own clock, the sandbox's CPU time, speed-of-light) are the backstop.
docs/threat-model.md, "Reaching the harness".
"""

from __future__ import annotations

import _thread
import ctypes
import importlib._bootstrap as bootstrap
import importlib._bootstrap_external as external
import importlib.abc
import inspect
import logging
import os
import sys
import sysconfig
import traceback
import types
from collections.abc import Callable
from typing import Any

import torch

import reference
from sandbox.child.code_origins import CODE_EVENTS as _CODE_EVENTS
from sandbox.child.code_origins import code_origins

SANDBOX_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The judge's package directory (sandbox/child/audit.py is two levels below it)."""

FINDINGS = "judge.findings"
SEAL = "judge.seal"
TRIPWIRE = "judge.tripwire"
MAX_FINDINGS = 64
"""Distinct findings kept: the first ends the judging; a candidate repeating one must not grow the record."""

_audit = sys.audit
_installed = False

_FRAME_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions"})
_GC_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
_TRACE_EVENTS = frozenset({"sys.settrace", "sys.setprofile"})
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_CODE_ATTRS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
_EVENTS = _FRAME_EVENTS | _GC_EVENTS | _TRACE_EVENTS | _CODE_EVENTS | frozenset({
    "object.__getattr__", "object.__setattr__", "object.__delattr__", "sys.addaudithook", "ctypes.dlsym",
    FINDINGS, SEAL, TRIPWIRE})
_HELPERS = (inspect.currentframe, inspect.stack, inspect.trace, inspect.getouterframes, inspect.getinnerframes,
            traceback.walk_stack, traceback.walk_tb, logging.currentframe, ctypes.CDLL.__getattr__,
            ctypes.CDLL.__getitem__, ctypes.LibraryLoader.__getattr__, ctypes.LibraryLoader.__getitem__)
"""Library functions that take a frame (or a C symbol) to hand it to their caller: the caller is who asked."""
_FRAME_STUB = compile("_getframe()", "<stub>", "eval")
"""The code a library evaluates to make a frame for its caller (tvm-ffi's `TracebackManager._create_frame`, with
`{"_getframe": sys._getframe}` as globals, under a C++ file name and line): what runs is compared, not the name."""
_COMPILE_HELPER_MODULES = ("codeop", "code", "py_compile", "compileall")
"""Standard-library modules that compile for their caller, under a file name the caller chooses: the caller is who
asked (with importlib's `source_to_code`, the same for one call)."""
_FRAME_WHY = "(a frame: any frame reaches the judge's own through f_back)"
_GC_WHY = "(the garbage collector reaches every object of the judge's)"


class Refused(RuntimeError):
    """Raised into candidate code that tries to add an audit hook, a tracer or a profiler, or to look up the
    interpreter's C API through ctypes. A RuntimeError: CPython drops a hook whose addition fails with one."""


def _inside(inner: str, outer: str) -> bool:
    return os.path.join(os.path.realpath(inner), "").startswith(os.path.join(os.path.realpath(outer), ""))


def _trusted_roots(untrusted: tuple[str, ...]) -> tuple[str, ...]:
    """Where trusted code lives: the interpreter's library directories, the judge's own packages, and every other
    directory on sys.path before the import that this process cannot write (a GPU host's packages may sit in
    dist-packages or a carried wheel directory that no sysconfig path names) and that neither holds nor lies
    inside one of the `untrusted` directories (the candidate's build and source directories, the working
    directory that `python -m` puts first on sys.path)."""
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    dirs |= {SANDBOX_DIR, os.path.dirname(reference.__file__)}
    dirs |= {p for p in sys.path if p and os.path.isdir(p) and not os.access(p, os.W_OK)
             and not any(_inside(p, x) or _inside(x, p) for x in untrusted if x)}
    dirs |= {os.path.realpath(d) for d in dirs}
    return tuple(sorted(os.path.join(d, "") for d in dirs))


def _tracer_roots() -> tuple[str, ...]:
    """Who may set a tracer or profiler: the judge (its `_profiled`) and torch (its profiler)."""
    dirs = {os.path.dirname(p) for p in (reference.__file__, torch.__file__)}
    dirs |= {SANDBOX_DIR}
    dirs |= {os.path.realpath(d) for d in dirs}
    return tuple(sorted(os.path.join(d, "") for d in dirs))


def install(untrusted: tuple[str, ...] = ()) -> None:
    """Add the judge's audit hook to this process (once; later calls do nothing). Call it before the candidate
    is imported: every module already imported is trusted by identity from here on. `untrusted`: directories
    the candidate could have written (its build and source directories), never trusted, nor any above them.

    The hook is built from the units below, each a set of closures over state that nothing in Python but the hook
    holds (no module attribute, no class a candidate could patch): `_record` (what the hook saw), `_trust` (whose
    frame is trusted), `_askers` (who raised an event), `code_origins` (code disguised as trusted code,
    sandbox/child/code_origins.py),
    `_private_channel` (the harness's findings, seals and tripwires), `_handler` (frames, the garbage collector,
    tracers, other audit hooks, the C API) and `_reentry_guard` (the hook's own events)."""
    global _installed
    if _installed:
        return
    _installed = True
    modules = sys.modules  # the interpreter's own dict, even if `sys.modules` is rebound later
    preloaded = {name: vars(m) for name, m in list(modules.items()) if type(m) is types.ModuleType}
    roots, tracer_roots = _trusted_roots(untrusted), _tracer_roots()
    record, hits, note = _record()
    trusted, where = _trust(modules, preloaded, roots)
    own: set[types.CodeType] = set()  # the hook's own functions, filled in below
    asker, compiler, chain = _askers(own, trusted, roots)
    code_event, code_chain = code_origins(modules, note, asker, compiler, trusted, where, roots, Refused)
    private = _private_channel(record, hits, note)
    handle = _handler(note, asker, trusted, where, code_event, private, roots, tracer_roots)
    hook = _reentry_guard(handle)
    own.update(f.__code__ for f in (*chain, *code_chain, handle, hook))
    sys.addaudithook(hook)


def _record() -> tuple[dict[str, None], list[str], Callable[[str], None]]:
    """What the hook saw, kept where only the hook reaches it: its findings (insertion-ordered, deduplicated, at most
    MAX_FINDINGS, so a candidate repeating one cannot grow the record) and the tripwire hits it was told of."""
    record: dict[str, None] = {}
    hits: list[str] = []

    def note(text: str) -> None:
        if len(record) < MAX_FINDINGS:
            record[text] = None

    return record, hits, note


def _trust(modules: dict[str, Any], preloaded: dict[str, dict],
           roots: tuple[str, ...]) -> tuple[Callable[[Any, tuple[str, ...]], bool], Callable[[Any], str]]:
    """Whose frame is trusted (`trusted`), and where a frame is, for a finding (`where`). Bounds a candidate passing
    as library code by its globals or file name: a frame is trusted when its code's file lies under `allowed` and its
    globals are the very dict of the module its `__name__` names, imported before the candidate (`preloaded`) or
    imported since from a trusted directory. Cannot bound code a trusted library compiles under a name its caller
    chooses (the module docstring)."""
    dict_get, module_type = dict.get, types.ModuleType
    missing = object()

    def trusted(frame: Any, allowed: tuple[str, ...]) -> bool:
        if frame is None:
            return True  # raised from C with no Python frame: the interpreter itself
        filename = frame.f_code.co_filename
        if type(filename) is not str:
            return False
        globals_ = frame.f_globals
        name = dict_get(globals_, "__name__")
        if type(name) is not str:
            return False
        if dict_get(preloaded, name, missing) is globals_:
            return filename.startswith(allowed) or (filename.startswith("<frozen ") and allowed is roots)
        module = dict_get(modules, name)
        return type(module) is module_type and vars(module) is globals_ and filename.startswith(allowed)

    def where(frame: Any) -> str:
        if frame is None:
            return "native code"
        filename = frame.f_code.co_filename
        return f"{os.path.basename(filename) if type(filename) is str else '?'}:{frame.f_lineno}"

    return trusted, where


def _askers(own: set[types.CodeType], trusted: Callable[[Any, tuple[str, ...]], bool],
            roots: tuple[str, ...]) -> tuple[Callable[[], Any], Callable[[], Any], tuple[Callable, ...]]:
    """Who raised an event (`asker`) and who asked for a code object (`compiler`). Bounds a candidate hiding behind
    a helper: the frame-returning helpers (`_HELPERS`), a bare `_getframe()` a trusted library evaluates to hand
    a frame to its caller (`_FRAME_STUB`), and, for code objects, the standard library's compile-for-the-caller
    helpers are looked through to their caller. Returns the functions too, for the hook's own set (`own`)."""
    getframe, dict_get = sys._getframe, dict.get
    helpers = frozenset(f.__code__ for f in _HELPERS)
    stub_code, stub_names = _FRAME_STUB.co_code, _FRAME_STUB.co_names
    compile_helpers = _compile_helpers()

    def asker() -> Any:
        """The frame that raised the event: the first above the hook's own functions, the frame helpers and a
        frame a library made for its caller (then past that library function too)."""
        frame = getframe(1)
        while frame is not None and (frame.f_code in own or frame.f_code in helpers):
            frame = frame.f_back
        if frame is not None and made_for_caller(frame):
            frame = frame.f_back.f_back
        return frame

    def made_for_caller(frame: Any) -> bool:
        """A bare `_getframe()` evaluated by trusted library code: a frame that function makes to hand on.
        Evaluated by anything else, or running other code, it is who asked (its globals name no module)."""
        code, maker = frame.f_code, frame.f_back
        return (code.co_code == stub_code and code.co_names == stub_names and maker is not None
                and trusted(maker, roots))

    def compiler() -> Any:
        """Who asked for a code object: `asker`, past the standard library's compile-for-the-caller helpers."""
        frame = asker()
        while frame is not None and (frame.f_code in compile_helpers
                                     or dict_get(frame.f_globals, "__name__") in _COMPILE_HELPER_MODULES
                                     and trusted(frame, roots)):
            frame = frame.f_back
        return frame

    return asker, compiler, (asker, made_for_caller, compiler)


def _private_channel(record: dict[str, None], hits: list[str],
                     note: Callable[[str], None]) -> Callable[[str, tuple], None]:
    """The harness's private events (FINDINGS, SEAL, TRIPWIRE): the record read with a token the hook echoes (a hook
    that no longer answers is a finding), tripwire hits the candidate cannot clear, and sealed instances. Bounds
    edits of the harness's instances in place (the child, its clock, `Integrity`): the hook keeps a copy of each
    sealed instance's attributes where frames cannot reach, and reports any attribute replaced, added, or hiding a
    method."""
    seals: dict[str, tuple[Any, type, dict, dict, frozenset[str] | None, frozenset[str]]] = {}
    seal_findings = _seal_checker(seals)

    def private(event: str, args: tuple) -> None:
        if event == FINDINGS:
            token, out = args
            if type(out) is list:
                out.append(token)
                out.append(list(hits))
                out.extend(record)
                out.extend(seal_findings())
        elif event == TRIPWIRE:
            if len(hits) < MAX_FINDINGS and type(args[0]) is str:
                hits.append(args[0])
        else:  # SEAL: label, instance, names of its attributes that stay (None: all of them)
            label, obj, stable = args
            if type(label) is not str:
                return
            if label in seals:
                note(f"{label} was sealed twice")
                return
            cls = type(obj)
            methods = frozenset(name for klass in cls.__mro__ for name in vars(klass) if type(name) is str)
            seals[label] = (obj, cls, vars(obj), dict(vars(obj)), None if stable is None else frozenset(stable),
                            methods)

    return private


def _seal_checker(seals: dict[str, tuple[Any, type, dict, dict, frozenset[str] | None, frozenset[str]]]
                  ) -> Callable[[], list[str]]:
    """What changed in the sealed instances since their seal: class or attribute dict replaced, an attribute (the
    stable ones, where named) replaced, one added, or an instance attribute hiding its class's."""
    dict_get = dict.get
    missing = object()

    def seal_findings() -> list[str]:
        found = []
        for label, (obj, cls, live, copy, stable, methods) in seals.items():
            if type(obj) is not cls:
                found.append(f"{label} (its class was replaced)")
                continue
            current = vars(obj)
            if current is not live:
                found.append(f"{label} (its attribute dict was replaced)")
                continue
            keys = copy.keys() if stable is None else stable
            found.extend(f"{label}.{key}" for key in keys
                         if dict_get(current, key, missing) is not dict_get(copy, key, missing))
            for key in current:
                if type(key) is not str:
                    found.append(f"{label} (an attribute that is not a string)")
                elif stable is None and key not in copy:
                    found.append(f"{label}.{key} (added)")
                elif key in methods and key not in copy:
                    found.append(f"{label}.{key} (an instance attribute hides the class's)")
        return found

    return seal_findings


def _handler(note: Callable[[str], None], asker: Callable[[], Any], trusted: Callable[[Any, tuple[str, ...]], bool],
             where: Callable[[Any], str], code_event: Callable[[str, tuple], None],
             private: Callable[[str, tuple], None], roots: tuple[str, ...],
             tracer_roots: tuple[str, ...]) -> Callable[[str, tuple], None]:
    """Every event of `_EVENTS`, to its unit. Itself it bounds the ways to the harness's state and into its steps,
    when code not trusted asks: a frame taken (any frame reaches the harness's through f_back) or the garbage
    collector walked (recorded); a function's code or defaults replaced (recorded); a tracer or profiler set, the
    interpreter's C API looked up through ctypes (refused and recorded: tracers only from `tracer_roots`); any other
    audit hook (refused, whoever asks)."""
    event_text = _event_text  # bound here: the hook calls no function through this module's globals

    def handle(event: str, args: tuple) -> None:
        if event in (FINDINGS, SEAL, TRIPWIRE):
            private(event, args)
            return
        if event in _CODE_EVENTS:
            code_event(event, args)
            return
        what = event_text(event, args)
        if what is None:
            return
        frame = asker()
        if event == "sys.addaudithook":
            if not trusted(frame, roots):
                note(f"{what}, from {where(frame)}")
            raise Refused("the judge's audit hook is the only one in this process")
        ok = trusted(frame, tracer_roots if event in _TRACE_EVENTS else roots)
        if not ok:
            note(f"{what}, from {where(frame)}")
            if event in _TRACE_EVENTS or event == "ctypes.dlsym":
                raise Refused(f"{event} is refused by the judge")

    return handle


def _event_text(event: str, args: tuple) -> str | None:
    """What an event does, as a finding says it; None for an event that reaches nothing of the judge's (an attribute
    other than a frame's, a function's other attributes, a C symbol outside the interpreter's API)."""
    if event == "object.__getattr__":
        if args[1] not in _FRAME_ATTRS:
            return None
        return f"{type(args[0]).__name__}.{args[1]} {_FRAME_WHY}"
    if event in ("object.__setattr__", "object.__delattr__"):
        if type(args[0]) is not types.FunctionType or args[1] not in _CODE_ATTRS:
            return None
        return f"a function's {args[1]} replaced"
    if event == "ctypes.dlsym":
        if type(args[1]) is not str or not args[1].startswith(("Py", "_Py")):
            return None
        return f"ctypes lookup of the interpreter's {args[1]} (refused)"
    if event in _GC_EVENTS:
        return f"{event} {_GC_WHY}"
    if event in _FRAME_EVENTS:
        return f"{event} {_FRAME_WHY}"
    return f"{event} (refused: candidate code would run inside the judge's own steps)"


def _reentry_guard(handle: Callable[[str, tuple], None]) -> Callable[[str, tuple], None]:
    """The hook itself: events outside `_EVENTS` pass at once, and an event the hook raises while handling one on
    the same thread (its own `sys._getframe`) is not handled again."""
    get_ident = _thread.get_ident
    busy: set[int] = set()

    def hook(event: str, args: tuple) -> None:
        if event not in _EVENTS:
            return
        ident = get_ident()
        if ident in busy:
            return  # the hook's own sys._getframe
        busy.add(ident)
        try:
            handle(event, args)
        finally:
            busy.discard(ident)

    return hook


def _compile_helpers() -> frozenset[types.CodeType]:
    """importlib's `source_to_code` and the call that runs `compile` for it: a caller naming any file passes
    through them (SourceFileLoader.source_to_code(text, os.__file__))."""
    return frozenset({external.SourceLoader.source_to_code.__code__,
                      importlib.abc.InspectLoader.source_to_code.__code__,
                      bootstrap._call_with_frames_removed.__code__})


def findings() -> tuple[list[str], list[str]]:
    """(what the hook recorded, the tripwire hits it was told of). A hook that does not echo the fresh token
    (removed, or `sys.audit` replaced) is a finding of its own."""
    token = os.urandom(8).hex()
    out: list[Any] = []
    _audit(FINDINGS, token, out)
    if len(out) < 2 or out[0] != token:
        return ["the judge's audit hook did not answer (removed from the interpreter, or sys.audit replaced)"], []
    return [str(f) for f in out[2:]], list(out[1])


def seal(label: str, obj: object, stable: tuple[str, ...] | None = None) -> None:
    """From now on `findings` reports any attribute of `obj` replaced (only the `stable` ones, when named) or
    added, or an instance attribute hiding one of its class's."""
    _audit(SEAL, label, obj, stable)


def tripwire(op: str) -> None:
    """Tell the hook that a forbidden operator was called: a record the candidate cannot clear."""
    _audit(TRIPWIRE, op)
