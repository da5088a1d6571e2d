"""The precompiled headers' layout, as the parent writes it (sandbox/build/accel.py) and the build child's hooks read it
(sandbox/child/build/hooks.py): file names inside a variant, how flags are compared, what the accelerators' own words
in a compiler's output look like, and the hooks' version, part of every stored build outcome.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

PCH_NAME = "torch/extension.h.gch"
SUBSET_DIR = "main-subset"
"""Inside a variant: the subset PCH's own include directory (the child points CPATH at it)."""
STUB_TEXT = ("// A second #include <torch/extension.h> after the precompiled one: g++ looks for the header beside\n"
             "// the .gch it used, finds this, and goes on to torch's own (sandbox/child/build/hooks.py).\n"
             "#include_next <torch/extension.h>\n")
"""The header beside each `.gch`. g++ uses a PCH once per translation unit; for a later include of the same
name it looks for the header itself in the directory where it found the `.gch`, and without this fails with
`<dir>/torch/extension.h: No such file or directory` where torch alone compiles. torch's header, reached
through `#include_next`, is then skipped as already read (the PCH records its include guards and `#pragma
once` files). The subset PCH has its own stub (`SUBSET_STUB_TEXT`)."""
SUBSET_STUB_TEXT = ("// A second #include <torch/extension.h> after the precompiled subset of it: the subset\n"
                    "// stands for the whole header, so nothing more is read (sandbox/child/build/hooks.py).\n")
"""The header beside the subset's `.gch`: empty. Through `STUB_TEXT` a second include would parse the part of
torch/extension.h the subset lacks (torch's C++ frontend), which made a main.cpp that includes the header itself, as
most model-written `cpp_sources` do, cost more than with the full PCH. With this stub the subset stands for the
whole header at every include: a main.cpp that needs the frontend fails to compile and is built again with the full
PCH, exactly as one that includes the header once."""
FULL_NOT_BUILT = "the full precompiled torch/extension.h is not built yet"
"""What the build child's hooks say when main.cpp needed the full PCH and it was not there (it is built on demand,
sandbox/build/accel.py): the parent, reading it in the build's log, has it built for the next candidate."""
FLAGS_FILE = "flags.json"
HOOKS_VERSION = 4
"""What the build child's hooks (sandbox/child/build/hooks.py) do, as a number: part of every stored build outcome
(sandbox/build/compiler.py, `accelerator_config`), so that a compile error stored under older hooks is tried again."""
ACCELERATOR_WORDS = re.compile(r"\.gch\b|precompiled header|/judge-accel\b|/build-accel/|\.judge-pch\b"
                               r"|\.judge-slim\b")
"""What only a compiler's output that the judge's accelerators took part in contains."""


def normalise(cflags: list[str] | str) -> list[str]:
    """Tokens of a compile's flags, without the per-extension name (which no torch header mentions)."""
    text = cflags if isinstance(cflags, str) else " ".join(cflags)
    return [t for t in shlex.split(text) if not t.startswith("-DTORCH_EXTENSION_NAME=")]


FRONTEND = re.compile(r"\btorch::(?:nn|optim|data|jit|serialize|autograd|python|cuda|fft|linalg|special|nested"
                      r"|sparse|mps|xpu)::|\btorch::(?:save|load|NoGradGuard|AutoGradMode|manual_seed)\b")
"""What the subset PCH certainly lacks (torch's C++ frontend, sandbox/build/accel.py): a main.cpp that names it
gets the full PCH without trying. Anything else the subset lacks fails to compile and falls back the same."""


def wants_full_header(source: str) -> bool:
    """Whether a candidate's main.cpp will probably be offered the full PCH rather than the subset: its text names
    torch's C++ frontend. The parent then waits for the full PCH before the build (sandbox/build/accel.py); a wrong
    guess costs only time. Including torch/extension.h again, as most model-written `cpp_sources` do, is not such a
    sign: the subset's stub stands for the whole header (`SUBSET_STUB_TEXT`)."""
    return bool(FRONTEND.search(source))


def usable(variant_dir: Path) -> bool:
    """Whether a variant is published: its flags, and its subset PCH or its full one (or both). The parent publishes
    the subset first and moves the full PCH in later (sandbox/build/accel.py)."""
    return (variant_dir / FLAGS_FILE).is_file() and (
        (variant_dir / PCH_NAME).is_file() or (variant_dir / SUBSET_DIR / PCH_NAME).is_file())


def has_full(variant_dir: Path | str) -> bool:
    """Whether a variant's full PCH is in place (the last step of its build)."""
    return (Path(variant_dir) / PCH_NAME).is_file()
