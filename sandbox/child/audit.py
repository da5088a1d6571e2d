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
- `HookBaseline` and `active_hooks`: the registries through which candidate code would run inside a harness
  step without an audit event (gc callbacks, signal handlers and interval timers, sys.monitoring tools,
  threading's trace and profile functions, the unraisable hook, torch modes and saved-tensor hooks), checked
  against what the judge itself had before the import, at every reply and (the quick ones) at the end of
  every timed batch.

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
import gc
import importlib._bootstrap as bootstrap
import importlib._bootstrap_external as external
import importlib.abc
import inspect
import logging
import marshal
import os
import signal
import sys
import sysconfig
import threading
import traceback
import types
from dataclasses import dataclass
from typing import Any

import torch

import reference

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
_CODE_EVENTS = frozenset({"compile", "code.__new__", "marshal.loads", "marshal.load", "open", "exec",
                          "function.__new__"})
"""Where code objects come from and where they start to run: compiled from text (`compile`, exec/eval of a string;
compiling a syntax tree names no file, so its code is seen when it runs), built or copied with new fields
(`code.__new__`, also raised by `code.replace`), read from bytes (`marshal`) or from a compiled file (`open` of a
`.pyc`, which importlib then reads through marshal); run by exec/eval (`exec`) or made a function
(`function.__new__`)."""
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
_DISGUISE_WHY = ("(its frames would pass as the library's own, and any frame reaches the judge's through f_back; "
                 "refused)")
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
    the candidate could have written (its build and source directories), never trusted, nor any above them."""
    global _installed
    if _installed:
        return
    _installed = True
    modules = sys.modules  # the interpreter's own dict, even if `sys.modules` is rebound later
    preloaded = {name: vars(m) for name, m in list(modules.items()) if type(m) is types.ModuleType}
    roots, tracer_roots = _trusted_roots(untrusted), _tracer_roots()
    helpers = frozenset(f.__code__ for f in _HELPERS)
    stub_code, stub_names = _FRAME_STUB.co_code, _FRAME_STUB.co_names
    compile_helpers = _compile_helpers()
    importer = vars(modules["_frozen_importlib_external"])
    zip_importer = vars(modules["zipimport"]) if "zipimport" in modules else None
    marshal_loads = _marshal_loads
    getframe, get_ident, module_type = sys._getframe, _thread.get_ident, types.ModuleType
    dict_get = dict.get
    record: dict[str, None] = {}  # insertion-ordered, deduplicated
    hits: list[str] = []
    seals: dict[str, tuple[Any, type, dict, dict, frozenset[str] | None, frozenset[str]]] = {}
    busy: set[int] = set()
    missing = object()

    def note(text: str) -> None:
        if len(record) < MAX_FINDINGS:
            record[text] = None

    own: set[types.CodeType] = set()  # the hook's own functions, filled in below

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

    def disguised(filename: Any) -> bool:
        """A file name that would make a frame of the code trusted (`trusted` reads co_filename)."""
        # str's own startswith: a subclass's could be the candidate's (such a name is never trusted anyway)
        return isinstance(filename, str) and str.startswith(filename, roots + ("<frozen ",))

    def same_as_file(filename: str, source: Any) -> bool:
        if type(source) is str:
            source = source.encode()
        if type(source) is not bytes:
            return False
        try:
            with open(filename, "rb") as fh:
                return fh.read() == source
        except OSError:
            return False

    def code_event(event: str, args: tuple) -> None:
        """A code object under a trusted file name made by code not trusted, or from text that is not that file,
        or read from a compiled file the candidate could have written: refused and recorded."""
        if event == "open":
            path, mode = args[0], args[1]
            if (type(path) is str and path.endswith(".pyc") and type(mode) is str and "r" in mode
                    and os.path.basename(os.path.dirname(path)) != "__pycache__" and not path.startswith(roots)):
                what = f"a compiled module file {os.path.basename(path)!r} opened outside the library's directories"
                note(f"{what} {_DISGUISE_WHY}, from {where(asker())}")
                raise Refused(f"{what} is refused by the judge")
            return
        if event in ("exec", "function.__new__"):  # the cheap test first: these run all the time
            code = args[0] if args else None
            if type(code) is types.CodeType and disguised(code.co_filename):
                frame = compiler()
                if not trusted(frame, roots):
                    note(f"{event} of code under the file name {code.co_filename!r} of trusted code "
                         f"{_DISGUISE_WHY}, from {where(frame)}")
                    raise Refused("code under a trusted module's file name is refused by the judge")
            return
        if event in ("marshal.loads", "marshal.load"):
            frame = compiler()
            if not trusted(frame, roots):
                note(f"{event} (code objects from bytes carry any file name) {_DISGUISE_WHY}, from {where(frame)}")
                raise Refused(f"{event} is refused by the judge")
            if frame is not None and frame.f_globals is zip_importer and type(args[0]) is bytes:
                code = marshal_loads(args[0])  # a zip's compiled module keeps the file name it was compiled under
                if disguised(getattr(code, "co_filename", None)):
                    note(f"a compiled module in a zip archive under the file name {code.co_filename!r} "
                         f"{_DISGUISE_WHY}, from {where(frame)}")
                    raise Refused("a compiled module under a trusted module's file name is refused by the judge")
            return
        filename = args[1]
        if not disguised(filename):
            return
        frame = compiler()
        if not trusted(frame, roots):
            note(f"{event} under the file name {filename!r} of trusted code {_DISGUISE_WHY}, from {where(frame)}")
            raise Refused("code under a trusted module's file name is refused by the judge")
        if (event == "compile" and frame is not None and frame.f_globals is importer
                and not same_as_file(filename, args[0])):
            # importlib compiles a module's whole file; a loader that feeds it other text under that name lies
            note(f"an import compiled text that is not {filename!r} under its name {_DISGUISE_WHY}, from "
                 f"{where(frame)}")
            raise Refused("code under a trusted module's file name is refused by the judge")

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

    def handle(event: str, args: tuple) -> None:
        if event in (FINDINGS, SEAL, TRIPWIRE):
            private(event, args)
            return
        if event in _CODE_EVENTS:
            code_event(event, args)
            return
        if event == "object.__getattr__":
            if args[1] not in _FRAME_ATTRS:
                return
            what = f"{type(args[0]).__name__}.{args[1]} {_FRAME_WHY}"
        elif event in ("object.__setattr__", "object.__delattr__"):
            if type(args[0]) is not types.FunctionType or args[1] not in _CODE_ATTRS:
                return
            what = f"a function's {args[1]} replaced"
        elif event == "ctypes.dlsym":
            if type(args[1]) is not str or not args[1].startswith(("Py", "_Py")):
                return
            what = f"ctypes lookup of the interpreter's {args[1]} (refused)"
        elif event in _GC_EVENTS:
            what = f"{event} {_GC_WHY}"
        elif event in _FRAME_EVENTS:
            what = f"{event} {_FRAME_WHY}"
        else:
            what = f"{event} (refused: candidate code would run inside the judge's own steps)"
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

    own.update(f.__code__ for f in (asker, made_for_caller, compiler, code_event, handle, hook))
    sys.addaudithook(hook)


def _compile_helpers() -> frozenset[types.CodeType]:
    """importlib's `source_to_code` and the call that runs `compile` for it: a caller naming any file passes
    through them (SourceFileLoader.source_to_code(text, os.__file__))."""
    return frozenset({external.SourceLoader.source_to_code.__code__,
                      importlib.abc.InspectLoader.source_to_code.__code__,
                      bootstrap._call_with_frames_removed.__code__})


def _marshal_loads(data: bytes) -> Any:
    try:
        return marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return None


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


# --- the other registries: hooks without an audit event -------------------------------------------------

_ITIMERS = (("ITIMER_REAL", signal.ITIMER_REAL), ("ITIMER_VIRTUAL", signal.ITIMER_VIRTUAL),
            ("ITIMER_PROF", signal.ITIMER_PROF))
_MONITORING_TOOLS = range(6)
_SIGNALS = tuple(sorted(signal.valid_signals()))


@dataclass(frozen=True, kw_only=True)
class HookBaseline:
    """The judge's own hooks, before the candidate exists: anything else later is the candidate's."""

    gc_callbacks: tuple[Any, ...]
    signal_handlers: tuple[Any, ...]
    unraisablehook: Any
    python_threads: int
    monitoring_tools: tuple[str | None, ...]

    @classmethod
    def capture(cls) -> HookBaseline:
        return cls(gc_callbacks=tuple(gc.callbacks), signal_handlers=tuple(map(signal.getsignal, _SIGNALS)),
                   unraisablehook=sys.unraisablehook, python_threads=_thread._count(),
                   monitoring_tools=_monitoring_tools())


def _monitoring_tools() -> tuple[str | None, ...]:
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+
    return tuple(monitoring.get_tool(i) for i in _MONITORING_TOOLS) if monitoring is not None else ()


def active_hooks(base: HookBaseline, *, quick: bool = False) -> list[str]:
    """Hooks through which candidate code would run inside the judge's own steps (e.g. while `arm` makes a
    timed call's inputs, or after a batch's last event). `quick`: only those a timed batch's end can afford
    (a few microseconds): what could still fire after the window closes."""
    # First: a sys.monitoring tool's callback could run at any line below.
    hooks = [f"sys.monitoring tool {i} ({now})" for i, (now, then)
             in enumerate(zip(_monitoring_tools(), base.monitoring_tools)) if now != then]
    if sys.gettrace() is not None:
        hooks.append("sys.settrace (a tracer is installed)")
    if sys.getprofile() is not None:
        hooks.append("sys.setprofile (a profiler is installed)")
    if torch._C._len_torch_function_stack():
        hooks.append("torch function mode (left entered)")
    if torch._C._len_torch_dispatch_stack():
        hooks.append("torch dispatch mode (left entered)")
    callbacks = tuple(gc.callbacks)
    if len(callbacks) != len(base.gc_callbacks) or any(a is not b for a, b in zip(callbacks, base.gc_callbacks)):
        hooks.append("gc.callbacks (a garbage-collector callback is registered)")
    hooks.extend(f"signal.setitimer({name}) (an interval timer is armed)" for name, which in _ITIMERS
                 if signal.getitimer(which) != (0.0, 0.0))
    if quick:
        # A reply counts the threads itself (the parent's rule "threads"); a batch's end has no reply of its own.
        if _thread._count() > base.python_threads:
            hooks.append("a Python thread was alive when the batch ended")
        return hooks
    handlers = tuple(map(signal.getsignal, _SIGNALS))
    hooks.extend(f"signal handler for {signal.Signals(sig).name}" for sig, now, then
                 in zip(_SIGNALS, handlers, base.signal_handlers) if now is not then)
    if threading.gettrace() is not None:
        hooks.append("threading.settrace (a tracer for new threads)")
    if threading.getprofile() is not None:
        hooks.append("threading.setprofile (a profiler for new threads)")
    if sys.unraisablehook is not base.unraisablehook:
        hooks.append("sys.unraisablehook (replaced)")
    if torch._C._autograd._top_saved_tensors_default_hooks(True) is not None:
        hooks.append("torch.autograd.graph.saved_tensors_hooks (left entered)")
    return hooks
