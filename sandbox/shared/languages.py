"""The kernel languages this judge can judge, each named once: what must be installed, how its kernels are
found in the candidate's source and recognised among the device kernels that ran, and where its JIT caches go.

A language is judged on a host exactly when its package imports there (`available`): CUDA C++ through torch's
extension builder always, Triton, CuTe DSL (`nvidia-cutlass-dsl`) and TileLang when installed (the
`[languages]` extra; scripts/gpu/fetch_device_deps.sh carries them to the GPU hosts). A candidate importing one
that is not installed gets its verdict from the static checks (sandbox/static_checks.py), before any build.

The "runs code it built" rule (sandbox/child/harness.py `_evidence`) needs the candidate's own kernel among the
kernels that ran. Each language names its kernels differently on the device:

- CUDA C++: the `__global__` function's own name (inside the demangled signature).
- Triton: the `@triton.jit` function's name.
- CuTe DSL: `kernel_cutlass_<name>_<specialisation>` for a `@cute.kernel` function or method `<name>` (seen in
  `cute.compile(...).kernel_info` for nvidia-cutlass-dsl 4.8.1).
- TileLang: `<name>_kernel` for a `@T.prim_func` named `<name>` (the generated CUDA source's `__global__`).

JIT compilation and its caches. torch's extension builder runs in the build stage and never in the execution
child (sandbox/child/no_build.py). The JIT languages compile when the candidate asks them to, which for most
candidates is in `forward`, with the shapes of the call; their target is pinned for both children (`jit_env`:
sm_90a on the H100/H200 hosts), since the build child has no device to ask.

- TileLang compiles with nvcc (11-18 s for one kernel on the 2-core CPU machine, no GPU needed) and keeps what it
  built in `TILELANG_CACHE_DIR`, a folder of the build directory. The build stage calls ModelNew once per
  judged shape on uninitialised host tensors (sandbox/child/build/compile.py `precompile_jit`): every kernel compiles
  there, the call then fails to launch, and the execution child finds the kernels in the cache (a process's
  first call: 11.6 s compiling, 0.33 s from the cache). A candidate naming its own target (`target="cuda"`)
  compiles for sm_50 in the build child ("Unable to detect CUDA version") and again, for the card, in the
  execution child.
- CuTe DSL compiles through MLIR in-process (0.15-0.25 s per kernel on the CPU machine, no GPU needed; the shapes
  are part of the compiled kernel), in the execution child, on the first call of each shape: a compile in the
  build child would not be found there. Its disk cache (`CUTE_DSL_CACHE_DIR`, a folder of the build directory;
  base_dsl/cache_helpers.py) serves only direct calls of a `@cute.jit` function: `cute.compile`, what candidates
  call, passes `no_cache=True` and neither reads nor writes it. Even a direct call's key is a hash of the traced IR
  (a hit still runs the Python tracing), and that IR holds each tensor's memory space, `generic` for a host
  tensor and `gmem` for a device one: the build child's host tensors would compile a kernel no launch asks for.
  Upstream knows: NVIDIA/cutlass#3398 (open) reports the forced `no_cache`, and PR #3402 (open) lets
  `cute.compile` opt into the cache (two gates: `_compile` and `BaseDSL._setup_common`). Once a release carries
  it, the build stage can compile on tensors that present the device's memory space, and "cute" joins
  PRECOMPILED; `test_cute_compile_leaves_nothing_on_disk_for_the_execution_child_to_find` fails on that release.
- Triton compiles on its first launch into `TRITON_CACHE_DIR`, also in the build directory.

A compile left to the execution child runs on the candidate's first call of a shape, a correctness trial:
before the estimate and before any timed call, never inside one, but while the device is held; those seconds
are in the verdict's `device_held_s` (the GPU run of the language corpus, tests/corpus/cuda/*_cute.py and
*_tilelang.py, measures them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True, kw_only=True)
class Language:
    id: str
    """What a client names it by (`kernel-judge prompt --language ID`)."""
    name: str
    """What people call it, in diagnoses."""
    module: str | None
    """The top-level package that must import for the language to be judged; None: always judged."""
    declares: re.Pattern[str]
    """Finds the names of the kernels the candidate's source declares (group 1)."""
    device_name: str
    """How a declared kernel `{}` appears in the name of the device kernel that ran."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment of the build and execution children, `{build}` standing for their build directory."""
    companions: tuple[str, ...] = ()
    """Packages the language's kernels are written with, judged with it: CuTe DSL's examples take their stream
    from cuda-python (`cuda.bindings.driver`), TileLang's candidates reach TVM's (`tvm`, `tvm_ffi`). Without the
    language they are kernel languages of their own that the judge does not judge (sandbox/static_checks.py)."""


LANGUAGES = (
    Language(id="cuda", name="CUDA C++ or C++ extensions built with torch.utils.cpp_extension (load_inline)",
             module=None, declares=re.compile(r"__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)"),
             device_name="{}"),
    Language(id="triton", name="Triton kernels (@triton.jit)", module="triton",
             declares=re.compile(r"@triton\.jit[^\n]*\n\s*def\s+(\w+)"), device_name="{}",
             env={"TRITON_CACHE_DIR": "{build}/triton"}),
    Language(id="cute", name="CuTe DSL kernels (nvidia-cutlass-dsl, @cute.kernel)", module="cutlass",
             declares=re.compile(r"@(?:cute|cutlass\.cute)\.kernel\b[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)"),
             device_name="kernel_cutlass_{}", env={"CUTE_DSL_CACHE_DIR": "{build}/cute"}, companions=("cuda",)),
    Language(id="tilelang", name="TileLang kernels (@T.prim_func)", module="tilelang",
             declares=re.compile(r"@(?:T|tilelang\.language)\.prim_func\b[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)"),
             device_name="{}_kernel", env={"TILELANG_CACHE_DIR": "{build}/tilelang"},
             companions=("tvm", "tvm_ffi")),
)
BY_ID = {language.id: language for language in LANGUAGES}
JIT_SHAPES_ENV = "JUDGE_JIT_SHAPES"
"""The build child's environment variable naming (as JSON) the shapes the execution will judge, which a JIT
language compiles for in the build stage (sandbox/child/build/compile.py `precompile_jit`)."""
PRECOMPILED = ("tilelang",)
"""The languages whose build-stage compile the execution child finds again: TileLang's cache is on disk in the
build directory. CuTe DSL's `cute.compile` keeps its result in the process that called it (its disk cache serves
only direct calls of `@cute.jit` functions, and by a key that host tensors do not match), so compiling it in the
build child would be lost there."""
IDS = tuple(BY_ID)


def installed(module: str) -> bool:
    """Whether `module`'s top-level package is installed in this (the judge's) environment.

    Only its spec is looked up: nothing of the package runs (a dotted name's spec would import its parent,
    so the top level alone is asked). The execution child runs the same interpreter and site-packages.
    """
    top = module.split(".")[0]
    if top in sys.modules or top in sys.builtin_module_names:  # imported already (find_spec would read its
        return True                                            # __spec__, which __main__ may lack)
    return importlib.util.find_spec(top) is not None


def available() -> list[Language]:
    """The languages this host judges, in the order of LANGUAGES."""
    return [language for language in LANGUAGES if language.module is None or installed(language.module)]


def judged_packages() -> frozenset[str]:
    """The top-level packages of the languages this host judges, their companions included: a candidate importing
    any other kernel language is refused whether or not it is installed here."""
    return frozenset(package for language in available()
                     for package in ((language.module,) if language.module else ()) + language.companions)


def kernel_names(source: str) -> frozenset[str]:
    """The substrings that identify the candidate's own kernels among the device kernels that ran: every
    kernel its source declares, in every language, as that language names it on the device."""
    names: set[str] = set()
    for language in LANGUAGES:
        names |= {language.device_name.format(name) for name in language.declares.findall(source)}
    return frozenset(names)


def child_env(build_dir: str) -> dict[str, str]:
    """The JIT caches of every language, inside the candidate's build directory."""
    return {key: value.format(build=build_dir) for language in LANGUAGES for key, value in language.env.items()}


def arch_list() -> str:
    """The architectures builds target: TORCH_CUDA_ARCH_LIST, else the visible GPUs', else Hopper's 9.0."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if torch.cuda.is_available():
        caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
        return ";".join(f"{major}.{minor}" for major, minor in caps)
    return "9.0"


ARCH_ENTRY = re.compile(r"(?P<major>\d+)\.(?P<minor>\d+)(?P<suffix>[af]?)(?:\+PTX)?")
"""One TORCH_CUDA_ARCH_LIST entry: 9.0, 9.0a, 10.0f, 8.6+PTX."""


def jit_env(architectures: str) -> dict[str, str]:
    """The JIT languages' target, the same in the build child (which has no device to ask) and the execution
    child, so that what one compiles the other finds in the cache: the newest architecture of the list, with the
    architecture-specific features (sm_90a: wgmma, TMA) that TileLang and CuTe DSL use from Hopper on."""
    newest = architectures.replace(",", ";").replace(" ", ";").split(";")
    found = ARCH_ENTRY.fullmatch([entry for entry in newest if entry.strip()][-1].strip())
    if found is None:
        raise ValueError(f"TORCH_CUDA_ARCH_LIST entry not understood: {architectures!r}")
    major, minor, suffix = found["major"], found["minor"], found["suffix"]
    # "9.0a" (an arch list written for Hopper's specific features) already names them: no second "a" (the GPU
    # hosts' list is "9.0a"; "sm_90aa" was a KeyError inside CuTe DSL)
    arch = f"sm_{major}{minor}{suffix or ('a' if int(major) >= 9 else '')}"
    return {"CUTE_DSL_ARCH": arch, "TILELANG_DEFAULT_TARGET": json.dumps({"kind": "cuda", "arch": arch})}
