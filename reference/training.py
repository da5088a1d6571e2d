"""The training variants of both tasks: `kl_div_train` and `cross_entropy_train` (forward + backward).

Same KernelBench module, shapes and input distributions as the forward tasks (`planted` included), but
`predictions` requires grad: the candidate's `ModelNew` returns the loss, the judge calls
`loss.backward(scale)` and checks both the loss and d loss / d predictions against fp64 ground truth.
Losses like these are written as custom kernels mostly for training (Liger-Kernel's fused losses exist for
exactly this), where the backward pass and the memory it holds matter as much as the forward.

The incoming gradient `scale` is not 1: it comes from each call's seed (`grad_output_scale`), as a loss
scale does under mixed-precision training, so a backward that ignores its `grad_output` is wrong.

Ground truth in closed form, in fp64 (chunked by rows like the forward truth):
- kl_div, batchmean: loss = sum(t * (log t - log p)) / B, so d loss / d p = -t / (p * B);
- cross_entropy, mean: loss = mean_i(logsumexp(x_i) - x_i[y_i]), so d loss / d x = (softmax(x) - onehot(y)) / B.
"""

from __future__ import annotations

import dataclasses
import random
import struct

import torch

from reference import cross_entropy, kl_div
from reference.task import Shape, Task, TaskId, Tolerance, Training

SCALE_RANGE = (1.5, 4.0)
"""|grad_output| is drawn from this range with a random sign: never within 33% of 1, so a backward that
ignores grad_output (or its sign) misses the truth by far more than any tolerance."""


def grad_output_scale(seed: int) -> float:
    """The incoming gradient of one call's `loss.backward`, from the call's seed (exactly an fp32 value).

    Parent and child derive it alike; it need not be secret (knowing it does not help skip work).
    """
    rng = random.Random(seed ^ 0x5CA1E)
    value = rng.uniform(*SCALE_RANGE) * rng.choice((-1.0, 1.0))
    return struct.unpack("f", struct.pack("f", value))[0]


# --- fp64 gradients ---------------------------------------------------------------------------------

def _kl_div_gradient(inputs: list[torch.Tensor], start: int, stop: int) -> torch.Tensor:
    """d/dp of sum(t * (log t - log p)) / B: -t / (p * B), rows start:stop, fp64."""
    predictions, targets = inputs
    rows = predictions.shape[0]
    return -targets[start:stop].double() / (predictions[start:stop].double() * rows)


def _cross_entropy_gradient(inputs: list[torch.Tensor], start: int, stop: int) -> torch.Tensor:
    """d/dx of mean(logsumexp(x) - x[y]): (softmax(x) - onehot(y)) / B, rows start:stop, fp64."""
    logits, targets = inputs
    rows = logits.shape[0]
    grad = torch.softmax(logits[start:stop].double(), dim=1)
    grad[torch.arange(stop - start, device=grad.device), targets[start:stop]] -= 1.0
    return grad.div_(rows)


def _magnitude(inputs: list[torch.Tensor], start: int, stop: int, truth: torch.Tensor) -> torch.Tensor:
    """kl_div: |truth|. Each element is one quotient, so its honest error is relative to itself."""
    return truth.abs()


def _cross_entropy_magnitude(inputs: list[torch.Tensor], start: int, stop: int, truth: torch.Tensor) -> torch.Tensor:
    """cross_entropy: |truth|, plus 1 at the target. There the gradient is softmax - 1, a difference of terms
    of size ~1: where the target dominates its row, the truth is tiny but fp32's error is that of the softmax
    (|x - lse| * 2^-24, up to ~5e-6, measured up to 7.5e-6 for PyTorch's own backward at 8192x4096)."""
    magnitude = truth.abs()
    magnitude[torch.arange(stop - start, device=truth.device), inputs[1][start:stop]] += 1.0
    return magnitude


# --- the tasks ---------------------------------------------------------------------------------------
#
# Gradient tolerances. The gradient is compared elementwise in per-row units, batch * gradient / scale
# (kl_div: -t / p; cross_entropy: softmax - onehot): the batch mean makes every element ~1/B, and an
# absolute tolerance must not shrink with the batch. y passes when |y - t| <= atol + rtol * m, where m is
# |t| for kl_div (each element is one quotient) and |t| plus 1 at the target for cross_entropy (there the
# gradient is softmax - 1, a difference of terms of size ~1: where the target dominates its row the truth
# is tiny, but fp32's error is that of the softmax, ~|x - lse| * 2^-24).
#
# Measured error of honest fp32 gradients vs fp64 truth (scripts/gpu/measure_tolerance.py --gradient; worst
# element over every distribution, `planted` included, 2 seeds each; CPU x86, torch 2.13, 2026-11-23; not
# yet measured on a GPU). torch = autograd of the reference Model in fp32 (loss.backward(scale)); closed =
# the closed form as a kernel writes it (kl_div -(t / p) * (scale / B); cross_entropy (exp(x - max) / sum -
# onehot) * (scale / B), the sum reduced as a one-block-per-row kernel does); logspace (kl_div) =
# -exp(log t - log p) * scale / B; lse (cross_entropy) = (exp(x - lse) - onehot) * scale / B with an fp32
# lse. Cells: max relative error where |t| >= 1e-3 / max absolute error (per-row units) / worst error as a
# fraction of the tolerance below:
#
#   kl_div           64x512                        2048x16384
#     torch          1.1e-07 / 3.4e+16 / 0.00      1.2e-07 / 1.6e+18 / 0.00
#     closed         1.1e-07 / 3.4e+16 / 0.00      1.1e-07 / 2.8e+18 / 0.00
#     logspace       3.7e-06 / 3.9e+17 / 0.04      6.6e-06 / 8.0e+19 / 0.07
#   cross_entropy    128x256                       8192x4096
#     torch          5.9e-06 / 4.2e-07 / 0.00      7.8e-04 / 7.5e-06 / 0.07
#     closed         5.9e-06 / 1.7e-07 / 0.00      2.9e-04 / 5.2e-07 / 0.00
#     lse            2.8e-05 / 6.5e-07 / 0.01      4.1e-04 / 1.3e-06 / 0.01
#   (kl_div's absolute errors are huge only because `planted` puts t / p up to ~1e23 in per-row units; they
#   are ~1e-7 of those values. cross_entropy's relative errors >= 1e-4 are all at targets that dominate their
#   row, where the truth is the tiny difference softmax - 1: there the magnitude is ~1, not |t|.)
#
# Before the +1 at the target, PyTorch's own fp32 backward reached 0.75 of an |t|-relative tolerance at
# 8192x4096 (error 7.5e-6 where the truth is ~1e-20): it would have failed at larger batches. Neither
# error grows with the batch in per-row units (unlike the loss, which accumulates), only with how extreme
# the rows are. rtol 1e-4 and atol 1e-5 leave >= 14x over the worst honest error measured; the cheats they
# must catch are off by O(1) in per-row units: a zero gradient, a sub-sample of rows, a gradient cached from
# other inputs, an ignored grad_output (|scale| >= 1.5).
GRADIENT_TOLERANCE = Tolerance(
    atol=1e-5,
    rtol=1e-4,
    why="per-row units (batch * gradient / scale), relative to |truth| (plus 1 at cross_entropy's target); >= 14x the "
        "worst measured error of honest fp32 gradients",
)

_KL_STATEMENT = (
    "Training variant: predictions arrives with requires_grad=True. ModelNew.forward returns the loss as above; "
    "the judge then calls loss.backward(g) with a scalar g != 1 and reads predictions.grad, which must equal "
    "g * d loss / d predictions = -g * targets / (predictions * batch_size). The gradient must come from your own "
    "code: a torch.autograd.Function whose backward runs your kernel, or a fused forward that computes the "
    "gradient in the same pass and whose backward scales it by g. Forward + backward are timed as one step."
)
_CE_STATEMENT = (
    "Training variant: predictions arrives with requires_grad=True. ModelNew.forward returns the loss as above; "
    "the judge then calls loss.backward(g) with a scalar g != 1 and reads predictions.grad, which must equal "
    "g * d loss / d predictions = g * (softmax(predictions) - onehot(targets)) / batch_size. The gradient must "
    "come from your own code: a torch.autograd.Function whose backward runs your kernel, or a fused forward that "
    "computes the gradient in the same pass and whose backward scales it by g. Forward + backward are timed as one "
    "step."
)


def _kl_div_train() -> Task:
    base = kl_div.TASK
    return dataclasses.replace(
        base,
        id=TaskId.KL_DIV_TRAIN,
        title="KL divergence (batchmean), forward + backward",
        # The reference operator and every way to it stay forbidden, as in the forward task. kl_div has no
        # backward operator of its own in torch 2.x (it is composite: autograd differentiates its
        # decomposition), so the aten::kl_div tripwire is the one that fires, also when a backward calls it
        # under enable_grad (tests/corpus/hostile/cpu/t1_reference_backward_kl.py).
        # Read both fp32 matrices once, write the fp32 gradient once, and the fp32 loss.
        min_bytes=lambda shape: 3 * shape[0] * shape[1] * 4 + 4,
        training=Training(
            forward_task=TaskId.KL_DIV,
            grad_input=0,
            gradient_truth=_kl_div_gradient,
            gradient_tolerance=GRADIENT_TOLERANCE,
            gradient_magnitude=_magnitude,
            forward_min_bytes=base.min_bytes,
            statement=_KL_STATEMENT,
        ),
    )


CE_BACKWARD_OPS = frozenset({
    "aten::_log_softmax_backward_data", "aten::_softmax_backward_data",
    "aten::nll_loss_backward", "aten::nll_loss2d_backward",
})
"""The backward operators of what the forward task forbids: log_softmax, softmax, nll_loss."""


def _cross_entropy_train() -> Task:
    base = cross_entropy.TASK
    return dataclasses.replace(
        base,
        id=TaskId.CROSS_ENTROPY_TRAIN,
        title="Cross entropy (mean), forward + backward",
        forbidden_aten_ops=base.forbidden_aten_ops | CE_BACKWARD_OPS,
        forbidden_python_names=base.forbidden_python_names | {
            "torch.ops.aten._log_softmax_backward_data", "torch.ops.aten._softmax_backward_data",
            "torch.ops.aten.nll_loss_backward", "torch.ops.aten.nll_loss2d_backward",
            "torch._C._VariableFunctions._log_softmax_backward_data",
            "torch._C._VariableFunctions._softmax_backward_data",
            "torch._log_softmax_backward_data", "torch._softmax_backward_data",
        },
        # Read the fp32 logits and int64 targets once, write the fp32 gradient once, and the fp32 loss.
        min_bytes=lambda shape: 2 * shape[0] * shape[1] * 4 + shape[0] * 8 + 4,
        training=Training(
            forward_task=TaskId.CROSS_ENTROPY,
            grad_input=0,
            gradient_truth=_cross_entropy_gradient,
            gradient_tolerance=GRADIENT_TOLERANCE,
            gradient_magnitude=_cross_entropy_magnitude,
            forward_min_bytes=base.min_bytes,
            statement=_CE_STATEMENT,
        ),
    )


KL_DIV_TRAIN = _kl_div_train()
CROSS_ENTROPY_TRAIN = _cross_entropy_train()


def full_gradient(task: Task, inputs: list[torch.Tensor]) -> torch.Tensor:
    """The whole fp64 gradient (tests and tools; the judge works on row chunks)."""
    assert task.training is not None
    rows = inputs[task.training.grad_input].shape[0]
    return task.training.gradient_truth(inputs, 0, rows)


def gradient_shape(task: Task, shape: Shape) -> Shape:
    """The gradient has the shape of the input it is taken with respect to: (batch, dim) for both tasks."""
    return tuple(shape)
