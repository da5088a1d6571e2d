"""Candidates in a kernel language this host cannot run get a compile_error before any build or device time
(issue 24): decided by whether the module imports here, not by a list alone."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from reference import get_task
from sandbox import Status, prepare
from sandbox.static_checks import check_source, supported_languages
from sandbox.verdict import Verdict

KL = get_task("kl_div")
HEAD = "import torch\nimport torch.nn as nn\n"
TAIL = "\nclass ModelNew(nn.Module):\n    def forward(self, p, t):\n        return (t * (t.log() - p.log())).sum()\n"


def findings(body: str) -> list:
    return check_source(HEAD + body + TAIL, KL.forbidden_python_names, KL.forbidden_aten_ops).findings


@pytest.mark.parametrize(("body", "module"), [
    ("import tilelang\nimport tilelang.language as T\n", "tilelang"),
    ("import cutlass\n", "cutlass"),
    ("import cutlass.cute as cute\n", "cutlass.cute"),
    ("from cutlass.cute.runtime import from_dlpack\n", "cutlass.cute.runtime"),
    ("import thunderkittens as tk\n", "thunderkittens"),
    ("import jax.numpy as jnp\n", "jax.numpy"),
    ("import cupy\n", "cupy"),
    ("from numba import cuda\n", "numba"),
    ("import pycuda.autoinit\n", "pycuda.autoinit"),
    ("import mojo\n", "mojo"),
    ("def build():\n    import tilelang\n    return tilelang\n", "tilelang"),
    ("import importlib\nT = importlib.import_module('tilelang.language')\n", "tilelang.language"),
    ("cp = __import__('cu' + 'py')\n", "cupy"),
])
def test_a_kernel_language_that_is_not_installed_is_named_with_what_this_host_judges(body: str, module: str) -> None:
    found = findings(body)
    assert [f.rule for f in found] == ["unsupported_language"], found
    message = found[0].message
    assert f"imports {module} (" in message and "not installed here" in message, message
    assert "torch.utils.cpp_extension (load_inline)" in message and "PyTorch operators" in message, message
    assert message.startswith(f"line {found[0].line}: ")


def test_an_optional_import_with_a_fallback_is_not_flagged() -> None:
    body = "try:\n    import tilelang\nexcept ImportError:\n    tilelang = None\n"
    assert findings(body) == []


def test_an_importable_module_is_not_flagged_even_when_it_is_a_kernel_language(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Installing a language makes it supported: a real package `tilelang` on the path is importable."""
    assert findings("import numpy as np\nimport torch.utils.cpp_extension\n") == []
    assert [f.rule for f in findings("import tilelang\n")] == ["unsupported_language"]
    (tmp_path / "tilelang").mkdir()
    (tmp_path / "tilelang" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert findings("import tilelang\n") == []


def _install(root: Path, *packages: str) -> None:
    for package in packages:
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")
    importlib.invalidate_caches()  # the path's finder caches its directory listing


@pytest.mark.parametrize("body", ["import cupy\n", "from numba import cuda\n", "import jax.numpy as jnp\n",
                                  "try:\n    import cupy\nexcept ImportError:\n    cupy = None\n",
                                  "def kernel():\n    import numba\n    return numba\n"])
def test_a_kernel_language_the_judge_does_not_judge_is_refused_even_when_installed(
        body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU image may carry CuPy, Numba or JAX for other reasons: importing them there succeeds, the kernel would
    compile on the device's time and no rule of the judge knows its kernels. Refused before any build, guarded
    import or not (the guard's fallback is not taken where the import succeeds)."""
    _install(tmp_path, "cupy", "numba", "jax")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = findings(body)
    assert [f.rule for f in found] == ["unsupported_language"], found
    assert "a kernel language this judge does not judge (it is installed here" in found[0].message
    assert "torch.utils.cpp_extension (load_inline)" in found[0].message


def test_a_languages_companion_is_judged_with_it_and_refused_without_it(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """cuda-python (`import cuda.bindings.driver`) is how CuTe DSL candidates take their stream: judged where CuTe
    DSL is, a kernel language of its own (NVRTC from Python) where it is not."""
    _install(tmp_path, "cuda")
    monkeypatch.syspath_prepend(str(tmp_path))
    body = "import cuda.bindings.driver as cuda\n"
    assert [f.rule for f in findings(body)] == ["unsupported_language"]
    _install(tmp_path, "cutlass")
    assert findings("import cutlass.cute as cute\n" + body) == []


def test_tilelangs_runtime_installed_alone_is_refused_and_judged_with_tilelang(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The real tvm-ffi, installed for the tests without TileLang: its `cpp.load_inline` would build C++ and CUDA
    in the execution child, so alone it is a kernel language the judge does not judge; beside TileLang, whose
    kernels it runs, it is judged with it."""
    assert importlib.util.find_spec("tvm_ffi") is not None, "installed by the [test] extra"
    body = "import tvm_ffi.cpp\n"
    found = findings(body)
    assert [f.rule for f in found] == ["unsupported_language"], found
    assert "Apache TVM FFI" in found[0].message and "it is installed here" in found[0].message
    _install(tmp_path, "tilelang")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert findings("import tilelang\n" + body) == []


def test_a_missing_package_counts_at_the_top_of_the_module_only() -> None:
    found = findings("import no_such_package_for_the_judge\n")
    assert [f.rule for f in found] == ["missing_module"], found
    assert "no_such_package_for_the_judge" in found[0].message
    assert findings("def helper():\n    import no_such_package_for_the_judge\n") == []


def test_triton_is_listed_as_supported_exactly_when_it_imports() -> None:
    import importlib.util

    listed = any("Triton" in language for language in supported_languages())
    assert listed == (importlib.util.find_spec("triton") is not None)


def test_the_pipeline_rejects_it_before_building(judge_config) -> None:  # noqa: ANN001 - a fixture
    source = HEAD + "import cutlass.cute as cute\n" + TAIL
    verdict = prepare("kl_div", source, target="cpu", config=judge_config)
    assert isinstance(verdict, Verdict) and verdict.status is Status.COMPILE_ERROR, verdict
    assert verdict.details == {"stage": "static_checks", "rule": "unsupported_language"}
    assert "compile" not in verdict.stages
