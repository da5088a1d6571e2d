"""Static checks: forbidden operators through any alias, judge imports, ModelNew presence."""

import pytest

from reference import get_task
from sandbox.static_checks import check_source

KL = get_task("kl_div")
CE = get_task("cross_entropy")


def findings(source, task=KL):
    report = check_source(source, task.forbidden_python_names, task.forbidden_aten_ops)
    return [f.rule for f in report.findings], report


HEAD = "import torch\nimport torch.nn as nn\n"
TAIL = "\nclass ModelNew(nn.Module):\n    def forward(self, p, t):\n        return f(p, t)\n"


@pytest.mark.parametrize(
    "body",
    [
        "import torch.nn.functional as F\ndef f(p, t): return F.kl_div(p.log(), t)",
        "from torch.nn.functional import kl_div as k\ndef f(p, t): return k(p.log(), t)",
        "def f(p, t): return torch.nn.functional.kl_div(p.log(), t)",
        "def f(p, t): return getattr(torch.nn.functional, 'kl_' + 'div')(p.log(), t)",
        "def f(p, t): return torch.ops.aten.kl_div.default(p.log(), t)",
        "from torch.nn import functional\ndef f(p, t): return functional.kl_div(p.log(), t)",
        "def f(p, t): return torch.nn.KLDivLoss(reduction='batchmean')(p.log(), t)",
        "import reference.kl_div\ndef f(p, t): return reference.kl_div.TASK",
        "from reference.problems.kl_div import Model\ndef f(p, t): return Model()(p, t)",
        "import importlib\ndef f(p, t): return importlib.import_module('reference')",
    ],
)
def test_forbidden_references_are_found(body):
    rules, report = findings(HEAD + body + TAIL)
    assert set(rules) & {"forbidden_operator", "judge_import"}, report.findings


def test_cross_entropy_forbids_log_softmax_and_nll():
    rules, _ = findings(HEAD + "def f(p, t): return torch.nn.functional.nll_loss(p.log_softmax(1), t)" + TAIL, CE)
    assert "forbidden_operator" in rules


def test_an_honest_candidate_has_no_findings_and_its_imports_are_noted():
    source = (HEAD + "from torch.utils.cpp_extension import load_inline\n"
              "def f(p, t): return (t * (t.log() - p.log())).sum()" + TAIL)
    rules, report = findings(source)
    assert rules == []
    assert "torch.utils.cpp_extension" in report.imports


def test_kernel_names_containing_the_op_name_are_not_flagged():
    source = HEAD + "src = 'void kl_div_kernel(float* x) {}'\ndef kl_div_fast(p, t): return p\nf = kl_div_fast" + TAIL
    rules, _ = findings(source)
    assert rules == []


def test_missing_model_new_and_forward():
    assert findings("import torch\nx = 1\n")[0] == ["missing_model_new"]
    assert findings("import torch\nclass ModelNew(torch.nn.Module):\n    pass\n")[0] == ["missing_forward"]


def test_dynamic_code_is_noted():
    _, report = findings(HEAD + "def f(p, t): return eval('p')" + TAIL)
    assert report.dynamic_code and report.dynamic_code[0].startswith("eval")
