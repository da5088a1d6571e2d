"""The audit hook's unit against code disguised as trusted code (sandbox/child/audit.py builds it into the hook).

`trusted` reads a frame's `co_filename`, which whoever makes the code chooses: code compiled into a library module's
namespace under its file name, a code object copied with that name, read from bytes, or a compiled `.pyc` written and
imported would pass as the library's own, and any frame reaches the judge's through f_back. `code_origins` refuses
each where the candidate asks (the module docstring of sandbox/child/audit.py says what it cannot do).
"""

from __future__ import annotations

import marshal
import os
import types
from collections.abc import Callable
from typing import Any

CODE_EVENTS = frozenset({"compile", "code.__new__", "marshal.loads", "marshal.load", "open", "exec",
                          "function.__new__"})
"""Where code objects come from and where they start to run: compiled from text (`compile`, exec/eval of a string;
compiling a syntax tree names no file, so its code is seen when it runs), built or copied with new fields
(`code.__new__`, also raised by `code.replace`), read from bytes (`marshal`) or from a compiled file (`open` of a
`.pyc`, which importlib then reads through marshal); run by exec/eval (`exec`) or made a function
(`function.__new__`)."""
DISGUISE_WHY = ("(its frames would pass as the library's own, and any frame reaches the judge's through f_back; "
                 "refused)")


def code_origins(modules: dict[str, Any], note: Callable[[str], None], asker: Callable[[], Any],
                 compiler: Callable[[], Any], trusted: Callable[[Any, tuple[str, ...]], bool],
                 where: Callable[[Any], str], roots: tuple[str, ...],
                 refused: type[Exception]) -> tuple[Callable[[str, tuple], None], tuple[Callable, ...]]:
    """The `CODE_EVENTS`: a code object under a trusted file name made by code not trusted, or from text that is not
    that file, or read from a compiled file the candidate could have written, is refused and recorded. Bounds code
    disguised as a library's, whose frames would pass `trusted`: compiled under a library's file name, copied with
    one (`code.replace`), read from bytes (`marshal`), from a `.pyc` outside `__pycache__`, from a zip archive, or fed
    to importlib as a module's text. Returns the handler and its functions (the hook's own, for `asker`)."""
    disguised, same_as_file = disguise_tests(roots)
    importer = vars(modules["_frozen_importlib_external"])
    zip_importer = vars(modules["zipimport"]) if "zipimport" in modules else None
    compiled_file, run_code, from_bytes = _loaded_code(note, asker, compiler, trusted, where, roots, refused,
                                                       disguised, zip_importer)
    from_text = _compiled_text(note, compiler, trusted, where, roots, refused, disguised, same_as_file, importer)

    def code_event(event: str, args: tuple) -> None:
        if event == "open":
            compiled_file(args)
        elif event in ("exec", "function.__new__"):  # the cheap test first: these run all the time
            run_code(event, args)
        elif event in ("marshal.loads", "marshal.load"):
            from_bytes(event, args)
        else:
            from_text(event, args)

    return code_event, (compiled_file, run_code, from_bytes, from_text, code_event)


def _loaded_code(note: Callable[[str], None], asker: Callable[[], Any], compiler: Callable[[], Any],
                 trusted: Callable[[Any, tuple[str, ...]], bool], where: Callable[[Any], str], roots: tuple[str, ...],
                 refused: type[Exception], disguised: Callable[[Any], bool],
                 zip_importer: dict | None) -> tuple[Callable[[tuple], None], Callable[[str, tuple], None],
                                                     Callable[[str, tuple], None]]:
    """Code that is loaded, not compiled: a `.pyc` opened outside `__pycache__` and the library's directories
    (`compiled_file`), a code object under a trusted file name run or made a function (`run_code`), code read from
    bytes or from a zip archive's compiled module (`from_bytes`)."""
    marshal_loads = _marshal_loads

    def compiled_file(args: tuple) -> None:
        path, mode = args[0], args[1]
        if (type(path) is str and path.endswith(".pyc") and type(mode) is str and "r" in mode
                and os.path.basename(os.path.dirname(path)) != "__pycache__" and not path.startswith(roots)):
            what = f"a compiled module file {os.path.basename(path)!r} opened outside the library's directories"
            note(f"{what} {DISGUISE_WHY}, from {where(asker())}")
            raise refused(f"{what} is refused by the judge")

    def run_code(event: str, args: tuple) -> None:
        code = args[0] if args else None
        if type(code) is types.CodeType and disguised(code.co_filename):
            frame = compiler()
            if not trusted(frame, roots):
                note(f"{event} of code under the file name {code.co_filename!r} of trusted code "
                     f"{DISGUISE_WHY}, from {where(frame)}")
                raise refused("code under a trusted module's file name is refused by the judge")

    def from_bytes(event: str, args: tuple) -> None:
        frame = compiler()
        if not trusted(frame, roots):
            note(f"{event} (code objects from bytes carry any file name) {DISGUISE_WHY}, from {where(frame)}")
            raise refused(f"{event} is refused by the judge")
        if frame is not None and frame.f_globals is zip_importer and type(args[0]) is bytes:
            code = marshal_loads(args[0])  # a zip's compiled module keeps the file name it was compiled under
            if disguised(getattr(code, "co_filename", None)):
                note(f"a compiled module in a zip archive under the file name {code.co_filename!r} "
                     f"{DISGUISE_WHY}, from {where(frame)}")
                raise refused("a compiled module under a trusted module's file name is refused by the judge")

    return compiled_file, run_code, from_bytes


def _compiled_text(note: Callable[[str], None], compiler: Callable[[], Any],
                   trusted: Callable[[Any, tuple[str, ...]], bool], where: Callable[[Any], str], roots: tuple[str, ...],
                   refused: type[Exception], disguised: Callable[[Any], bool], same_as_file: Callable[[str, Any], bool],
                   importer: dict) -> Callable[[str, tuple], None]:
    """Text compiled (`compile`) or a code object built (`code.__new__`, `code.replace`) under a trusted file name:
    refused unless trusted code asks, and an import whose compiled text is not the file it names, refused."""

    def from_text(event: str, args: tuple) -> None:
        filename = args[1]
        if not disguised(filename):
            return
        frame = compiler()
        if not trusted(frame, roots):
            note(f"{event} under the file name {filename!r} of trusted code {DISGUISE_WHY}, from {where(frame)}")
            raise refused("code under a trusted module's file name is refused by the judge")
        if (event == "compile" and frame is not None and frame.f_globals is importer
                and not same_as_file(filename, args[0])):
            # importlib compiles a module's whole file; a loader that feeds it other text under that name lies
            note(f"an import compiled text that is not {filename!r} under its name {DISGUISE_WHY}, from "
                 f"{where(frame)}")
            raise refused("code under a trusted module's file name is refused by the judge")

    return from_text


def disguise_tests(roots: tuple[str, ...]) -> tuple[Callable[[Any], bool], Callable[[str, Any], bool]]:
    """Whether a file name would make a frame of its code trusted (`disguised`), and whether text is that file's own
    (`same_as_file`)."""

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

    return disguised, same_as_file



def _marshal_loads(data: bytes) -> Any:
    try:
        return marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return None
