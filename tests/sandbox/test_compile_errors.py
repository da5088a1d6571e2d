"""A failed build's errors (sandbox/build/errors.py): which ones a build without an accelerator cannot change
(then the first build's errors are the verdict's, at once), and the candidate.py line of each.

The rule is checked on compiler logs as g++ and nvcc write them, and then by a differential test: the compile
errors of the CPU corpus and a few broken candidates as models write them, each built with the rule and with
every fallback forced (`build_hooks.RETRY_EVERY_FAILURE`), must end the same. The line mapping is checked on the
files torch's own load_inline writes (its build step left out), so that a torch whose prelude changes is
followed, and end to end in the differential test.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
import torch.utils.cpp_extension as ext

from sandbox.build import accel as build_accel
from sandbox.build import advice as build_advice
from sandbox.child.build import hooks as build_hooks
from sandbox.build import compiler as build
from sandbox.build.errors import diagnosis_line, place
from sandbox.child.build.retry_rule import unchangeable
from sandbox.config import JudgeConfig
from sandbox.extract import ExtractionError, extract_candidate
from sandbox.pipeline import PreparedCandidate, prepare
from sandbox.verdict import Verdict

from .conftest import CORPUS, corpus_meta, offered_no_accelerator

EXT = Path("/build/ext/kl_cpp")


def failed(target: str, *output: str) -> str:
    """torch's RuntimeError text for a ninja run whose `target` failed with this compiler output."""
    return "\n".join([f"Error building extension 'kl_cpp': [1/2] c++ -c {EXT}/main.cpp -o {target}",
                      f"FAILED: {target} ", f"c++ -MMD -MF {target}.d -DTORCH_EXTENSION_NAME=kl_cpp -c {EXT}/main.cpp",
                      *output, "ninja: build stopped: subcommand failed."])


# --- the rule ---------------------------------------------------------------------------------------------

def test_syntax_and_type_errors_in_the_candidates_own_source_are_final() -> None:
    semicolon = failed("main.o", f"{EXT}/main.cpp: In function 'at::Tensor kl(at::Tensor)':",
                       f"{EXT}/main.cpp:11:91: error: expected ';' before '}}' token",
                       "   11 |         total += x", "      |                   ^")
    why = unchangeable(semicolon, EXT)
    assert why is not None and "main.cpp:11:91: expected ';'" in why
    nvcc = failed("cuda.cuda.o", f'{EXT}/cuda.cu(7): error: a value of type "float" cannot be used to initialize an '
                  'entity of type "int *"', "1 error detected in the compilation of \"cuda.cu\".")
    assert unchangeable(nvcc, EXT) is not None
    converts = failed("main.o", f"{EXT}/main.cpp:9:20: error: cannot convert 'at::Tensor' to 'float*' in init")
    assert unchangeable(converts, EXT) is not None


@pytest.mark.parametrize("output", [
    (f"{EXT}/main.cpp:12:5: error: 'kl_term' was not declared in this scope",),
    (f"{EXT}/main.cpp:3:20: error: 'enumtype' is not a member of 'torch'",),
    (f'{EXT}/cuda.cu(12): error: identifier "scale_factor" is undefined',),
    (f"{EXT}/cuda.cu(9): error: no operator \"+\" matches these operands",),
    (f"{EXT}/main.cpp:4:1: error: 'C10_HOST_DEVICE' does not name a type",),
    (f"{EXT}/main.cpp:8:30: error: expected primary-expression before 'float'",),  # an unknown template's cascade
    (f"In file included from {EXT}/main.cpp:1:", "/opt/torch/include/ATen/core/TensorBody.h:40:3: error: expected ';'"),
    (f"{EXT}/.judge-slim/kernel_judge_slim.h:3:1: error: expected ';' before 'namespace'",),
    ("cc1plus: error: unrecognized command-line option '-fno-such-flag'",),
    ("c++: fatal error: Killed signal terminated program cc1plus",),
], ids=["undeclared", "not-a-member", "nvcc-undefined", "no-operator", "unknown-macro", "cascade", "in-a-header",
        "in-the-slim-header", "unlocated", "killed"])
def test_errors_a_fuller_header_might_change_are_retried(output: tuple[str, ...]) -> None:
    assert unchangeable(failed("main.o", *output), EXT) is None


def test_every_failed_compile_must_be_final() -> None:
    both = (failed("main.o", f"{EXT}/main.cpp:11:91: error: expected ';' before '}}' token")
            + "\n" + failed("cuda.cuda.o", f'{EXT}/cuda.cu(12): error: identifier "scale" is undefined'))
    assert unchangeable(both, EXT) is None
    assert unchangeable("Error building extension 'kl_cpp': ld: cannot find -lfoo", EXT) is None  # no compile failed


# --- lines of candidate.py --------------------------------------------------------------------------------

CANDIDATE = '''import torch
from torch.utils.cpp_extension import load_inline

header = "torch::Tensor kl_forward(torch::Tensor p, torch::Tensor t);\\nint helper_count() { return 2 }\\n"
body = r"""
torch::Tensor kl_forward(torch::Tensor p, torch::Tensor t) {
    auto out = torch::empty_like(p);
    int broken = 1 +;  // BODY-ERROR
    return out;
}
"""
joined = "\\n".join(["int a", "= 1;", "float b = 2.0f", ";"])
kernel = """__global__ void scale(float* x) { \\
    x[threadIdx.x] *= 2.0f;
    int also_broken = ;  // CU-ERROR
}
"""
mod = load_inline(
    name="kl_cpp",
    cpp_sources=[header, body, joined],
    cuda_sources=kernel,
    functions=["kl_forward", "missing_fn"],
)
'''


def _line_of(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), 1) if marker in line)


def _torch_writes(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """Run CANDIDATE's load_inline as torch does, up to the build it leaves out: main.cpp and cuda.cu are
    torch's own, whatever its version puts before and after the candidate's text."""
    monkeypatch.setattr(ext, "_jit_compile", lambda *args, **kwargs: None)
    monkeypatch.setattr(ext, "remove_extension_h_precompiler_headers", lambda: None)
    namespace = {"load_inline": lambda **kw: ext.load_inline(**kw, build_directory=str(directory))}
    exec(compile(CANDIDATE.replace("from torch.utils.cpp_extension import load_inline\n", ""), "candidate", "exec"),
         namespace)


def test_errors_are_placed_on_the_candidates_own_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "ext" / "kl_cpp"
    directory.mkdir(parents=True)
    _torch_writes(monkeypatch, directory)
    main, cuda = (directory / "main.cpp").read_text(), (directory / "cuda.cu").read_text()
    at = {"body": _line_of(main, "BODY-ERROR"), "helper": _line_of(main, "helper_count"),
          "joined": _line_of(main, "float b = 2.0f"), "binding": _line_of(main, '"missing_fn"'),
          "cu": _line_of(cuda, "CU-ERROR")}
    log = "\n".join([f"/build/ext/kl_cpp/main.cpp:{at['body']}:20: error: expected primary-expression before ';' token",
                     f"/build/ext/kl_cpp/main.cpp:{at['helper']}:35: error: expected ';' before '}}' token",
                     f"/build/ext/kl_cpp/main.cpp:{at['joined']}:1: error: expected ',' or ';' before 'float'",
                     f"/build/ext/kl_cpp/main.cpp:{at['binding']}:50: error: 'missing_fn' was not declared here",
                     f"/build/ext/kl_cpp/cuda.cu({at['cu']}): error: expected an expression",
                     "/opt/torch/include/c10/util/Exception.h:12:3: error: something in a header"])
    errors = place(log, CANDIDATE, tmp_path)
    lines = [e.file_line for e in errors]
    assert lines[:2] == [_line_of(CANDIDATE, "BODY-ERROR"), _line_of(CANDIDATE, "helper_count")]
    assert lines[3] == _line_of(CANDIDATE, "functions=")  # load_inline's binding for a function never declared
    assert lines[4] == _line_of(CANDIDATE, "CU-ERROR")  # after a backslash-newline and the .cu's own prelude
    assert lines[2] is None and errors[2].code == "float b = 2.0f" and "main.cpp" in errors[2].note  # built at run time
    assert errors[5].file_line is None and errors[5].code is None and errors[5].location == "Exception.h:12:3"
    assert [e.kind for e in errors[:5]] == ["syntax", "syntax", "syntax", "undeclared", "syntax"]
    assert diagnosis_line(errors[0]) == (f"candidate.py line {lines[0]}: main.cpp:{at['body']}:20: "
                                         "expected primary-expression before ';' token")
    assert "the line reads: float b = 2.0f" in diagnosis_line(errors[2])
    assert "bindings load_inline writes" in diagnosis_line(errors[3])


def test_only_files_inside_the_build_are_read(tmp_path: Path) -> None:
    (tmp_path / "secret.cpp").write_text("int secret;\n")
    outside = place(f"{tmp_path}/secret.cpp:1:1: error: x\n/build/../etc/passwd:1:1: error: y", CANDIDATE,
                    tmp_path / "build")
    assert [e.code for e in outside] == [None, None]


# --- the shared headers a first build builds --------------------------------------------------------------

def test_a_build_that_first_builds_the_shared_headers_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def slow_build(root: Path, compiler: str, flags: list[str], **_: object) -> Path:
        import time

        final = build_accel.variant_path(root, compiler, flags)
        time.sleep(0.7)
        (final / "torch").mkdir(parents=True, exist_ok=True)
        (final / build_accel.PCH_NAME).write_text("")
        (final / build_accel.FLAGS_FILE).write_text("{}")
        return final

    monkeypatch.setattr(build_accel, "build_variant", slow_build)
    source = 'load_inline(name="x", cpp_sources="", extra_cflags=["-O2"])'
    first = build_accel.preparation(tmp_path, "cpu", source)
    again = build_accel.preparation(tmp_path, "cpu", source)
    assert first.root == again.root == tmp_path / build_accel.ACCEL_DIR
    assert first.building_s >= 0.7 and again.building_s == 0.0
    assert build_advice.pch_note(again.building_s, 5.0) is None
    assert build_advice.pch_note(32.4, 45.1).startswith("This build also built the shared precompiled headers")
    assert "32 s of its 45 s" in build_advice.pch_note(32.4, 45.1)


def test_the_shared_headers_build_is_a_stage_of_its_own(judge_config: JudgeConfig, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    real = build.offer_accelerators

    def offer(config: JudgeConfig, target: str, source: str) -> build.Offer:
        import time

        time.sleep(1.0)  # as if building the variants
        return replace(real(config, target, source), pch_building_s=1.0)

    monkeypatch.setattr(build, "offer_accelerators", offer)
    source = (CORPUS / "cpu" / "compile_error.py").read_text()
    verdict = prepare("kl_div", source, target="cpu", config=replace(judge_config, build_root=tmp_path))
    assert isinstance(verdict, Verdict) and verdict.status.value == "compile_error"
    assert verdict.stages["pch_build"] == 1.0 and verdict.stages["compile"] > 0
    assert "also built the shared precompiled headers" in verdict.diagnosis
    assert verdict.compile_log.count("also built the shared precompiled headers") == 1
    assert verdict.compile_errors and verdict.compile_errors[0].file_line == _line_of(source, "undeclared_weight * i")


# --- the rule never changes a verdict ---------------------------------------------------------------------

MODEL = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < p.numel(); ++i) {
        LINE
    }
    return torch::full({}, (float)(total / (double)p.size(0)), p.options());
}
"""

kl = load_inline(name="NAME", cpp_sources=cpp_source, functions=["kl_div_forward"], extra_cflags=["-O2"],
                 verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return kl.kl_div_forward(predictions, targets)
'''
"""A kl_div candidate as models write them (no second include of torch/extension.h, so main.cpp is offered the
subset PCH first and has a fallback to skip), broken at LINE."""
TERM = "if (tp[i] > 0.0f) total += (double)tp[i] * std::log((double)tp[i] / (double)pp[i])"
SUBSET_ONLY = "static_assert(sizeof(torch::enumtype::kMean) > 0, \"torch's enum.h, outside the subset\");"
BROKEN = {
    "semicolon": (TERM, True),
    "type": ("float* q = p; total += q[i];", True),
    "own_undeclared": ("total += kl_term(tp[i], pp[i]);", False),
    "subset_only": (f"{TERM}; {SUBSET_ONLY}", False),
    "subset_only_and_semicolon": (f"{SUBSET_ONLY} {TERM}", False),
}
"""name: (the line, whether the rule skips the fallback)."""
PROSE = "I fused the loop into one pass.\n\nFirst, the plan:\n1. read\n2. reduce\n\n```python\n"
CORPUS_ERRORS = [p for p in sorted((CORPUS / "cpu").glob("*")) + sorted((CORPUS / "hostile" / "cpu").glob("*"))
                 if p.is_file() and corpus_meta(p).get("expect") == "compile_error"]
SKIPPED = "not built again with fuller headers"
FELL_BACK = "main.cpp needs more of torch/extension.h than its subset"


def _cases() -> dict[str, tuple[str, str]]:
    """name: (task, text as sent)."""
    cases = {p.name: (corpus_meta(p)["task"], p.read_text(encoding="utf-8")) for p in CORPUS_ERRORS}
    for name, (line, _) in BROKEN.items():
        text = MODEL.replace("LINE", line).replace("NAME", f"kl_{name}")
        cases[name] = ("kl_div", f"{PROSE}{text}```\n" if name == "semicolon" else text)
    return cases


def _offered_nothing(text: str, config: JudgeConfig) -> bool:
    """Whether a build of this text is given no accelerator (False for a text with no code: it is decided before
    any build, both ways)."""
    try:
        return offered_no_accelerator(extract_candidate(text), config)
    except ExtractionError:
        return False


def _outcome(prepared: PreparedCandidate | Verdict) -> str:
    return "built" if isinstance(prepared, PreparedCandidate) else prepared.status.value


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_skipping_the_fallback_never_changes_a_verdict(judge_config: JudgeConfig, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    forced = replace(judge_config, build_root=tmp_path / "forced")  # its own root: no outcome of the rule's reused
    real = build.offer_accelerators

    def offer(config: JudgeConfig, target: str, source: str) -> build.Offer:
        made = real(config, target, source)
        if config.build_root != forced.build_root:
            return made
        return replace(made, env={**made.env, build_hooks.RETRY_EVERY_FAILURE: "1"})

    monkeypatch.setattr(build, "offer_accelerators", offer)
    cases = _cases()
    assert len(CORPUS_ERRORS) >= 3 and "compile_error.py" in cases
    # A case offered no accelerator is built once: with nothing offered, its build child runs no hook, so forcing
    # every fallback changes nothing in it (model_kl_div_std14.py: ~60 s of g++ on torch's headers under C++14).
    once = {name for name, (_, text) in cases.items() if _offered_nothing(text, judge_config)}
    assert "model_kl_div_std14.py" in once and not once & set(BROKEN) and "compile_error.py" not in once, once
    runs = [(name, config) for name in cases for config in (judge_config, forced)
            if config is judge_config or name not in once]
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda run: prepare(cases[run[0]][0], cases[run[0]][1], target="cpu", config=run[1]),
                             runs))
    outcomes = {(name, config is forced): prepared for (name, config), prepared in zip(runs, done)}
    outcomes.update({(name, True): outcomes[name, False] for name in once})

    for name in cases:
        rule, every = outcomes[name, False], outcomes[name, True]
        assert _outcome(rule) == _outcome(every), f"{name}: {_outcome(rule)} by the rule, {_outcome(every)} forced"
        assert SKIPPED not in (every.compile_log or ""), name
        if isinstance(rule, Verdict) and rule.compile_errors:
            assert rule.compile_errors[0].message == every.compile_errors[0].message, name
            assert rule.compile_errors[0].file_line == every.compile_errors[0].file_line, name
    for name, (line, skipped) in BROKEN.items():
        rule, every = outcomes[name, False], outcomes[name, True]
        assert (SKIPPED in rule.compile_log) is skipped, f"{name}\n{rule.compile_log[-3000:]}"
        assert FELL_BACK in every.compile_log, name  # forced, the subset's failure was built again
        if name != "subset_only":
            assert rule.status.value == "compile_error", name
            assert rule.compile_errors[0].file_line == _line_of(MODEL, "LINE"), (name, rule.diagnosis)
            assert re.search(rf"^candidate\.py line {_line_of(MODEL, 'LINE')}: main\.cpp:\d+:\d+: ",
                             rule.diagnosis, re.M), rule.diagnosis
    assert _outcome(outcomes["subset_only", False]) == "built"  # the fallback still builds what the subset cannot
    sent = outcomes["semicolon", False].compile_errors[0]
    assert sent.sent_line == sent.file_line + PROSE.count("\n")  # the line in the completion as it was sent
