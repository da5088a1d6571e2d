"""Training steps timed in batches: the real training child (in a process of its own) runs three steps back to
back, keeps each step's gradient for `grad_check`, and refuses one gradient tensor reused across the batch.

The batch path runs on GPUs (sandbox/execution/timing.py sizes CPU batches at one call); here it is driven directly on
the
CPU with a PyTorch-only candidate, so no build is needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real children judging training batches

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).parent / "children" / "drive_training_batch.py"

HONEST = '''
import torch

class KL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p, t):
        ctx.save_for_backward(p, t)
        return (t * (torch.log(t) - torch.log(p))).sum() / p.shape[0]

    @staticmethod
    def backward(ctx, g):
        p, t = ctx.saved_tensors
        return -(t / p) / p.shape[0] * g, None

class ModelNew(torch.nn.Module):
    def forward(self, p, t):
        return KL.apply(p, t)
'''

# One gradient buffer for every step: the backward writes each step's gradient into it and makes it
# predictions.grad, so the gradients of a batch's earlier steps are overwritten before the judge reads them.
RECYCLED = HONEST.replace("return -(t / p) / p.shape[0] * g, None", """global BUFFER
        if "BUFFER" not in globals():
            BUFFER = torch.empty_like(p)
        torch.mul(-(t / p) / p.shape[0], g, out=BUFFER)
        ctx.leaf.grad = BUFFER
        return None, None""").replace("ctx.save_for_backward(p, t)",
                              "ctx.save_for_backward(p, t)\n        ctx.leaf = p")


def drive(tmp_path: Path, source: str, steps: int) -> dict:
    path = tmp_path / "candidate.py"
    path.write_text(source)
    done = subprocess.run([sys.executable, str(DRIVER), str(path), str(steps)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=False, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_batch_of_steps_keeps_every_gradient_for_its_check(tmp_path: Path) -> None:
    report = drive(tmp_path, HONEST, 3)
    assert report["made"] == report["outputs"] == report["times"] == report["after_all"] == 3
    assert report["unchanged"]
    # each step's own gradient (its own inputs and incoming scale), not the last step's for all three
    assert len(report["relative_errors"]) == 3 and max(report["relative_errors"]) < 1e-5
    assert "the last batch left 3 gradient(s)" in report["beyond"]


def test_one_gradient_tensor_for_several_steps_of_a_batch_is_refused(tmp_path: Path) -> None:
    report = drive(tmp_path, RECYCLED, 3)
    assert report == {"rejected": "predictions.grad shares memory with the gradient of another step in its batch "
                                  "(a recycled gradient)"}
