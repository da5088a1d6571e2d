"""Slim torch headers for a candidate's `.cu`: the same kernels built in a third of the time, torch's own
headers as the fallback.

Why: `load_inline` puts `#include <torch/types.h>` at the top of every `.cu` and most candidates add
`#include <torch/extension.h>`: ~290k lines of C++ that nvcc sends through three front ends (cudafe++,
cicc, the host compiler), 60-65 s of a fresh build whatever the kernels are (docs/results/nvcc-phases-*.md).
No precompiled header reaches those passes. What a `.cu` uses of torch is nearly always `at::Tensor`, a few
factories (`torch::empty`), `TORCH_CHECK`, `AT_DISPATCH_*`, and the CUDA stream: a small part of those lines.

What this module writes, per extension, in a directory of the candidate's own build (`SLIM_DIR`):

    kernel_judge_slim.h   torch's ATen/ATen.h less its operator tables (Functions.h, NativeFunctions.h and
                           the three headers that include them), the `ATen/ops/<name>.h` of every identifier of
                           the `.cu` that names an ATen operator, then torch/types.h less its includes: both
                           texts read from the installed torch, so its own declarations are the ones used
    torch/extension.h ...  one line each, including kernel_judge_slim.h, for the umbrellas in UMBRELLAS

The build child (sandbox/child/build/hooks.py) points nvcc, and only nvcc, at that directory (`-I` through
`NVCC_APPEND_FLAGS`; main.cpp and its precompiled header are untouched). If the `.cu` does not compile
against the slim headers, the directory is removed and the extension is built again exactly as torch
would (sandbox/child/build/hooks.py): a candidate never gets a compile error, a diagnosis or a verdict that torch's own
headers would not give it.

Why a build that compiles against both behaves the same: the slim header declares a subset of what the
full one declares, from the same files. Every operator the source names comes with its whole overload set
(one `ATen/ops/<name>.h` per name), so overload resolution sees the same candidates; anything missing is a
compile error, never a different choice. The one difference in meaning is `torch::` factories: with the
full headers they come from torch's autograd layer, which honours `requires_grad`; here they are ATen's,
which reject it. A `.cu` that mentions `requires_grad` or autograd is built with the full headers from the
start (`skip_reason`), as are those that name what the slim header certainly lacks (pybind11, torch::nn).
Kernels (device code) see the same declarations either way.

Trust: the files are written inside the isolated build child, into the candidate's own build directory,
from torch's headers and the candidate's text; they change nothing but how fast that candidate builds.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

SLIM_DIR = ".judge-slim"
"""Inside the extension's build directory: the execution child's copy of the build has it at the same
path, so ninja's record of the headers a `.cu` read still holds there and nothing is rebuilt."""
SLIM_HEADER = "kernel_judge_slim.h"
UMBRELLAS = ("torch/extension.h", "torch/torch.h", "torch/all.h", "torch/types.h", "ATen/ATen.h")
"""The headers that pull in all of ATen's operators; each is replaced by the slim header in a `.cu`."""
OPERATOR_TABLES = ("ATen/Functions.h", "ATen/NativeFunctions.h", "ATen/ScalarOps.h", "ATen/TensorIndexing.h",
                   "ATen/TensorOperators.h")
"""Dropped from ATen/ATen.h: the declarations of every operator (~110k lines), and the three headers that
include them. A `.cu` that uses tensor arithmetic (`a + b` on tensors) or indexing needs them: it fails to
compile here and is built with the full headers."""
TYPES_INCLUDES_DROPPED = ("ATen/ATen.h", "torch/csrc/autograd/generated/variable_factories.h",
                          "torch/csrc/autograd/variable.h", "torch/library.h")
"""Dropped from torch/types.h: ATen/ATen.h (the slim one precedes it), autograd's factories and variables
(see `skip_reason`), and operator registration."""
FULL_HEADERS_NEEDED = re.compile(r"requires_grad|autograd|pybind11|PYBIND11_|torch::nn\b|torch::jit|TORCH_LIBRARY"
                                 r"|torch::optim|torch::data|py::")
"""Text in a `.cu` that the slim header would treat differently (requires_grad, autograd) or certainly not
declare: such a `.cu` is built with the full headers without trying."""
READ_LIMIT = 4 << 20
"""Bytes of each `.cu` read to find the operators it names; a bigger file is built with the full headers."""
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"][^\n]*$', re.M)
_IDENTIFIER = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")


@dataclass(frozen=True, kw_only=True)
class SlimBuild:
    """What was written for one extension: the directory nvcc is pointed at and the operators included."""
    directory: Path
    operators: tuple[str, ...]


def skip_reason(cuda_text: str) -> str | None:
    """Why this `.cu` must be built with torch's full headers from the start, or None."""
    if len(cuda_text) > READ_LIMIT:
        return f"the .cu is over {READ_LIMIT >> 20} MiB"
    found = FULL_HEADERS_NEEDED.search(cuda_text)
    return f"the .cu mentions {found.group(0)!r}" if found else None


def find_header(include_dirs: list[Path], name: str) -> Path | None:
    """The file `#include <name>` reaches through these directories, in order."""
    for directory in include_dirs:
        path = directory / name
        if path.is_file():
            return path
    return None


def without_includes(text: str, dropped: tuple[str, ...]) -> str:
    """`text` with its `#include` lines of the `dropped` headers removed, everything else verbatim."""
    return _INCLUDE.sub(lambda m: f"// kernel-judge: {m.group(1)} left out" if m.group(1) in dropped
                        else m.group(0), text)


def operators_named(cuda_texts: list[str], include_dirs: list[Path]) -> tuple[str, ...]:
    """Identifiers of the sources that have an `ATen/ops/<name>.h`: the operators a `.cu` may call.

    Over-inclusion is harmless (a local variable called `sum` adds ATen's `sum` declarations, which the
    full headers declare too); every name with a header is kept, so no overload set is ever partial."""
    ops_dirs = [d / "ATen" / "ops" for d in include_dirs if (d / "ATen" / "ops").is_dir()]
    if not ops_dirs:
        return ()
    words = {w for text in cuda_texts for w in _IDENTIFIER.findall(text)}
    return tuple(sorted(w for w in words if any((d / f"{w}.h").is_file() for d in ops_dirs)))


def slim_header_text(include_dirs: list[Path], operators: tuple[str, ...]) -> str | None:
    """kernel_judge_slim.h for these operators, or None when this torch lacks the headers it is made of."""
    aten = find_header(include_dirs, "ATen/ATen.h")
    types = find_header(include_dirs, "torch/types.h")
    if aten is None or types is None:
        return None
    parts = [
        "// Written by the judge for this build (sandbox/child/build/slim_headers.py): torch's own ATen/ATen.h and",
        "// torch/types.h without the tables of every operator, plus the operators this .cu names.",
        "#pragma once",
        without_includes(aten.read_text(), OPERATOR_TABLES),
        *(f"#include <ATen/ops/{name}.h>" for name in operators),
        without_includes(types.read_text(), TYPES_INCLUDES_DROPPED),
    ]
    return "\n".join(parts) + "\n"


def write(build_directory: Path, cuda_texts: list[str], include_dirs: list[Path]) -> SlimBuild | None:
    """Write the slim headers for one extension's `.cu` files; None (nothing written) when they must not be
    used: a `.cu` that needs the full headers, or a torch whose headers are not laid out as expected."""
    if not cuda_texts or any(skip_reason(text) for text in cuda_texts):
        return None
    operators = operators_named(cuda_texts, include_dirs)
    header = slim_header_text(include_dirs, operators)
    if header is None:
        return None
    directory = build_directory / SLIM_DIR
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    (directory / SLIM_HEADER).write_text(header)
    for umbrella in UMBRELLAS:
        shadow = directory / umbrella
        shadow.parent.mkdir(parents=True, exist_ok=True)
        shadow.write_text(f'#pragma once\n#include "../{SLIM_HEADER}"  // {umbrella}, slimmed by the judge\n')
    return SlimBuild(directory=directory, operators=operators)


def remove(build_directory: Path) -> None:
    """Undo `write`: what was built against the slim headers is then out of date for ninja (a header it read
    is gone) and is compiled again with torch's own."""
    shutil.rmtree(build_directory / SLIM_DIR, ignore_errors=True)


def first_error(log: str) -> str:
    """The first compiler error of a failed slim build, without its file and line: the build log names it,
    and the parent's error parser must not take it for an error of the candidate's own build."""
    for line in log.splitlines():
        match = re.search(r"\berror\b\s*:?\s*(.*)", line)
        if match and match.group(1).strip():
            return match.group(1).strip()[:200]
    return "no error line"
