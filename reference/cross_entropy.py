"""KernelBench L1-95, cross entropy: `F.cross_entropy(predictions, targets)`, the mean over the batch.

The problem an LLM is shown is `problems/cross_entropy.py`, verbatim. This module adds what judging needs:
inputs drawn on the device from a seed (the official distribution and adversarial ones inside the domain),
fp64 ground truth, the tolerance, the policy and the bytes a perfect kernel moves.

The domain: fp32 logits (batch, classes), any finite values, and int64 targets in [0, classes). Every
distribution but one keeps |logits| <= 80; "large_logits" puts every row hundreds away from 0 (up to
|logits| < 1000), where exp(x) overflows or underflows in fp32 while exp(x - rowmax) and eager PyTorch's
loss stay finite and accurate, so a kernel that skips the max subtraction is caught (inf or NaN).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from reference.problems import cross_entropy as problem
from reference.task import (OFFICIAL, Shape, Task, TaskId, Tolerance, generator, log_uniform, paired_generators,
                            planted_rows, row_chunks)

PROBLEM_SOURCE = Path(problem.__file__).read_text()

MAX_ABS_LOGIT = 80.0
"""Bound on |logits| in every distribution but "large_logits"."""
LARGE_SHIFT = (160.0, 900.0)
"""Magnitude of "large_logits"' per-row shift. With a spread <= 50 every logit of a row is over 88.8 (exp overflows)
or under -110 (exp underflows to 0), and |logits| < 950 < 1024, where fp32's spacing is <= 6.1e-5: an honest row
loss m + log(s) - x[target] rounds m + log(s) by <= 3.1e-5, ~1e-5 of a row loss (2..50)."""

def _official(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # get_inputs(): logits uniform in [0, 1), uniform targets, drawn in that order. The loss is then
    # ~log(classes) + 0.5 - 0.5 whatever the seed, which is why the adversarial ones exist.
    return [torch.rand(rows, cols, generator=g, device=device),
            torch.randint(0, cols, (rows,), generator=g, device=device)]


def _shifted_scaled(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # Per-row scale, log-uniform over [0.1, 20], and per-row shift, uniform over [-30, 30]: rows are
    # not identically distributed (a sub-sample of rows misestimates the mean), large shifts need the
    # max subtraction, large scales make the loss depend on the target's logit, not on log(classes).
    draw = dict(generator=g, device=device)
    scale = log_uniform(rows, 0.1, 20.0, g, device)
    shift = torch.rand(rows, 1, **draw).mul_(60.0).sub_(30.0)
    logits = torch.rand(rows, cols, **draw).mul_(scale).add_(shift)
    return [logits, torch.randint(0, cols, (rows,), **draw)]


def _dominant(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # Official-like logits, but one row in eight has one logit raised by 10..60: at the target in half
    # of them (loss ~0: tests log(1 + tiny)) and elsewhere in the other half (loss ~ the height).
    # The batch mean is then carried by a few rows.
    draw = dict(generator=g, device=device)
    logits = torch.rand(rows, cols, **draw)
    targets = torch.randint(0, cols, (rows,), **draw)
    pick = torch.randint(0, 16, (rows,), **draw)
    elsewhere = (targets + torch.randint(1, max(cols, 2), (rows,), **draw)) % cols
    height = torch.rand(rows, **draw).mul_(50.0).add_(10.0)
    row = torch.arange(rows, device=device)
    zero = torch.zeros((), device=device)
    logits[row, targets] += torch.where(pick == 0, height, zero)
    logits[row, elsewhere] += torch.where(pick == 1, height, zero)
    return [logits, targets]


def _adversarial_targets(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # Gaussian logits with a per-row scale in [0.5, 5]; a third of the targets sit at the row's
    # minimum (largest possible loss), a third at its maximum (smallest), a third at random. A kernel
    # that reads the wrong column, or approximates the loss from the row statistics alone, is off.
    draw = dict(generator=g, device=device)
    logits = torch.randn(rows, cols, **draw).mul_(log_uniform(rows, 0.5, 5.0, g, device))
    logits.clamp_(-MAX_ABS_LOGIT, MAX_ABS_LOGIT)  # never binds in practice (|randn| < 14); a guarantee
    mode = torch.randint(0, 3, (rows,), **draw)
    random_targets = torch.randint(0, cols, (rows,), **draw)
    targets = torch.where(mode == 0, logits.argmin(dim=1), torch.where(mode == 1, logits.argmax(dim=1), random_targets))
    return [logits, targets]


PLANTED_HEIGHT = (-2.0, 60.0)
"""The hidden logit is log(classes * (e - 1)) + U(-2, 60): <= 8.3 + 60 + 2 < MAX_ABS_LOGIT at 131072 classes."""


def _planted(rows: int, cols: int, seed: int, device: torch.device) -> list[torch.Tensor]:
    # Official draws (logits U(0, 1), uniform targets), then between R/1024 and R/64 rows (at least 1) at
    # random positions get one hidden logit, at a random column other than the target, of height
    # log(classes * (e - 1)) + U(-2, 60). That row's logsumexp becomes ~the height instead of the official
    # ~log(classes * (e - 1)) (8.85909 at 4096 classes), adding 0.1..60 to its loss while its target logit
    # stays an official U(0, 1) value. What this defeats (tests/reference/test_planted.py and
    # scripts/experiments/predictability.py measure it):
    #   - the constant-logsumexp trick, log(classes * (e - 1)) - mean(x[i, target_i]): it reads only the
    #     target logits, which are official everywhere, and misses every planted row's extra loss;
    #   - reading all the targets and a fraction of the logits (rows, columns, cells, the target logits
    #     first) and estimating the rest: the targets say nothing of where the hidden logits are, and a
    #     fraction f of the logits holds a fraction f of them, a random count of random heights: 31..37
    #     tolerances off in the median at f = 10%, 104..147 at 1% (official shape;
    #     docs/results/predictability-2026-11-26.md);
    #   - recognising "official" inputs cheaply: away from the planted cells every value is official
    #     (targets included), so a test of a few sampled values or rows sees official inputs unless it
    #     samples a planted row (finding one costs reading ~R/k rows, 1/64 of the data or more).
    # The targets come from one sub-seed, the logits from the other (reference.task.sub_seeds): the
    # correctness schedule pairs two trials with the same targets and fresh logits.
    targets_gen, logits_gen = paired_generators(seed, device)
    targets = torch.randint(0, cols, (rows,), generator=targets_gen, device=device)
    draw = dict(generator=logits_gen, device=device)
    logits = torch.rand(rows, cols, **draw)
    picked, n = planted_rows(rows, 1024, 64, logits_gen, device)
    column = (targets[picked] + torch.randint(1, max(cols, 2), (n,), **draw)) % cols
    height = torch.rand(n, **draw).mul_(PLANTED_HEIGHT[1] - PLANTED_HEIGHT[0])
    logits[picked, column] = height.add_(PLANTED_HEIGHT[0] + math.log(cols * (math.e - 1.0)))
    return [logits, targets]


def _large_logits(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # Every row shifted by a random sign times U(LARGE_SHIFT), with a per-row spread log-uniform over [3, 50]:
    # exp(x) is inf in the positive rows (x > 88.7) and 0 in the negative ones (x < -110), so a kernel
    # that does not subtract the row's maximum returns inf or NaN, while the loss, which does not change
    # when a row is shifted, is an ordinary 2..50 and eager PyTorch (log_softmax subtracts the maximum)
    # gets it to fp32 accuracy. Uniform targets.
    draw = dict(generator=g, device=device)
    spread = log_uniform(rows, 3.0, 50.0, g, device)
    shift = torch.rand(rows, 1, **draw).mul_(LARGE_SHIFT[1] - LARGE_SHIFT[0]).add_(LARGE_SHIFT[0])
    shift.mul_(torch.randint(0, 2, (rows, 1), **draw).mul_(2).sub_(1))
    logits = torch.rand(rows, cols, **draw).mul_(spread).add_(shift)
    return [logits, torch.randint(0, cols, (rows,), **draw)]


GENERATORS = {OFFICIAL: _official, "shifted_scaled": _shifted_scaled, "dominant": _dominant,
              "adversarial_targets": _adversarial_targets, "large_logits": _large_logits}
"""One generator per input distribution: (rows, cols, generator, device) -> [logits, targets]."""
PAIRED = {"planted": _planted}
"""Distributions drawn from two sub-seeds of the seed (reference.task.sub_seeds): (rows, cols, seed, device)."""
DISTRIBUTIONS = (*GENERATORS, *PAIRED)


def make_inputs(shape: Shape, distribution: str, seed: int, device: torch.device) -> list[torch.Tensor]:
    """[logits, targets]: fp32 (batch, classes) and int64 (batch,) in [0, classes).

    Drawn on `device` from a generator seeded with `seed`: the same (shape, distribution, seed, device)
    gives bit-identical tensors in any process (two generators for the paired distributions). On the CPU the
    official distribution is bit-identical to `torch.manual_seed(seed); get_inputs()` at that size
    (tests/reference/test_inputs.py checks it).
    """
    rows, cols = shape
    if distribution in PAIRED:
        return PAIRED[distribution](rows, cols, seed, device)
    if distribution not in GENERATORS:
        raise ValueError(f"unknown cross_entropy distribution {distribution!r}; known: {', '.join(DISTRIBUTIONS)}")
    return GENERATORS[distribution](rows, cols, generator(seed, device), device)


def ground_truth(inputs: list[torch.Tensor]) -> torch.Tensor:
    """The reference loss in fp64: mean over rows of logsumexp(x) - x[target], as a 0-dim tensor.

    `F.cross_entropy` with its defaults (no weights, no label smoothing, ignore_index -100, which the
    targets never take). Computed over row chunks to bound the fp64 copy.
    """
    logits, targets = inputs
    rows, cols = logits.shape
    chunks = row_chunks(rows, cols)
    total = torch.zeros((), dtype=torch.float64, device=logits.device)
    for start in chunks:
        x = logits[start:start + chunks.step].double()
        t = targets[start:start + chunks.step]
        total += (torch.logsumexp(x, dim=1) - x.gather(1, t[:, None]).squeeze(1)).sum()
    return total / rows


TASK = Task(
    id=TaskId.CROSS_ENTROPY,
    title="Cross entropy (mean)",
    kernelbench_id="L1-95",
    problem_source=PROBLEM_SOURCE,
    model_cls=problem.Model,
    official_shape=(problem.batch_size, problem.num_classes),
    cpu_shape=(128, 256),
    # A GPT-2 sized vocabulary (odd width, long rows), many short rows, an odd width under 4096.
    extra_shapes=((4096, 50257), (65536, 1000), (1000, 4095)),
    cpu_extra_shapes=((37, 1001), (4, 8195), (1000, 37)),
    distributions=DISTRIBUTIONS,
    timing_distributions=("planted",),
    paired_distributions=("planted",),
    make_inputs=make_inputs,
    ground_truth=ground_truth,
    # --- judging metadata ------------------------------------------------------------------------
    # The output is one scalar; y passes when |y - t| <= atol + rtol * |t| against fp64 truth t.
    #
    # Why not KernelBench's atol = rtol = 1e-2: on the official inputs the loss is ~8.36 for every seed
    # (relative spread across seeds, measured: 6.9e-3 at 128x256, 6.0e-4 at 8192x4096, 1.9e-4 at the
    # official 32768x4096), so returning a constant passes 1e-2 on every trial.
    # tests/reference/test_tolerance.py shows it, and that the constant fails here.
    #
    # Measured error of honest fp32 computations vs fp64 truth (scripts/gpu/measure_tolerance.py; worst
    # over 3 seeds). torch = the reference Model in fp32; block = a one-block-per-row kernel (max,
    # 256 strided sequential partial sums of exp(x - max), a tree, log, minus x[target], row losses
    # added one by one); naive = the same with each row summed left to right. Max relative error:
    #
    #   CPU (x86, torch 2.13)          official  shifted_scaled  dominant  adversarial_targets
    #     128x256       torch           6.3e-08    8.0e-08       8.6e-08    6.0e-08
    #                   block           2.1e-07    2.9e-07       1.9e-07    1.3e-07
    #                   naive           2.1e-07    2.9e-07       1.4e-07    1.3e-07
    #     1000x4095     torch           1.1e-07    5.6e-08       4.7e-08    1.1e-07
    #                   naive           7.3e-07    9.1e-07       6.2e-07    6.8e-07
    #     8192x4096     torch           8.7e-08    6.0e-08       7.5e-08    7.7e-08
    #                   block           1.8e-06    1.3e-06       2.5e-06    6.0e-07
    #                   naive           1.8e-06    1.4e-06       2.6e-06    6.9e-07
    #     32768x4096    torch           1.1e-07    8.1e-08       1.3e-07    8.1e-08
    #                   block           2.6e-06    2.5e-06       2.4e-06    4.0e-06
    #                   naive           2.7e-06    2.4e-06       2.4e-06    3.9e-06
    #   H100 (torch 2.11, CUDA 13.0)
    #     32768x4096    torch           6.4e-08    5.4e-08       5.9e-08    7.9e-08
    #                   block / naive   1.6e-06    2.2e-06       2.2e-06    3.8e-06
    #     4096x50257    block / naive   1.6e-06    7.4e-07       2.4e-06    1.8e-06
    #     65536x1000    block / naive   1.9e-06    5.3e-06       3.1e-06    5.4e-06
    #     1000x4095     block / naive   5.5e-07    5.5e-07       7.7e-07    1.2e-06
    #   (torch fp32 stays <= 1.7e-7 at every shape and distribution, CPU and H100.)
    #   planted (CPU, torch 2.13, 3 seeds, 2026-11-23; not yet measured on a GPU):
    #     128x256       torch 1.0e-07   block 1.4e-07   naive 1.4e-07
    #   (tests/reference/test_planted.py: the fp32 reference and a one-by-one fp32 sum of row losses stay
    #   under 2e-7 at 1024x4096 too): the planted rows' large losses do not worsen honest error.
    #
    # The worst honest error grows with the batch (row losses, all of similar size, accumulated in
    # fp32): ~4e-6 at the official size, 5.4e-6 at 65536 rows. rtol 1e-4 leaves an ~18x margin, is 100x
    # tighter than KernelBench's, and is about half the official seed-to-seed spread: a constant
    # already fails most official trials, and on the adversarial distributions the loss moves by
    # 1e-3..1e-2 between seeds. atol 1e-6 is negligible next to any loss here (~1 to ~13).
    tolerance=Tolerance(
        atol=1e-6,
        rtol=1e-4,
        why="~18x the worst measured error of honest fp32 kernels (fp32 accumulation of row losses) vs fp64 truth",
    ),
    output_shape=(),
    output_dtype=torch.float32,
    # cross_entropy is log_softmax + nll_loss; forbid every ATen operator that is the loss or its core
    # row reduction. logsumexp is the whole reduction (the loss is logsumexp - gather). softmax is
    # forbidden too: log(softmax(x)).gather(target) is the reference up to rounding, so allowing it
    # would let a candidate hand the entire row reduction to PyTorch and wrap a trivial kernel round the
    # gather. exp, max, sum, log and gather remain allowed building blocks.
    forbidden_aten_ops=frozenset({
        "aten::cross_entropy_loss",
        "aten::nll_loss", "aten::nll_loss_nd", "aten::nll_loss_forward",
        "aten::nll_loss2d", "aten::nll_loss2d_forward",
        "aten::log_softmax", "aten::_log_softmax", "aten::special_log_softmax",
        "aten::logsumexp", "aten::special_logsumexp",
        "aten::softmax", "aten::_softmax", "aten::special_softmax", "aten::_safe_softmax",
    }),
    # Every Python path to those operators in torch 2.x (torch, torch._C._VariableFunctions,
    # torch._C._nn, torch.Tensor methods, torch.special, functional, nn modules), the fused
    # linear_cross_entropy of torch >= 2.10, Categorical (its log_prob is the per-row loss), PyTorch's
    # Python decompositions/references (pure tensor code: the run-time tripwires would not see them),
    # and the judge's own package.
    forbidden_python_names=frozenset({
        "torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss",
        "torch.nn.functional.log_softmax", "torch.nn.functional.softmax",
        "torch.nn.functional.linear_cross_entropy",
        "torch.nn.CrossEntropyLoss", "torch.nn.NLLLoss", "torch.nn.NLLLoss2d", "torch.nn.LogSoftmax",
        "torch.nn.Softmax", "torch.nn.LinearCrossEntropyLoss",
        "torch.nn.modules.loss.CrossEntropyLoss", "torch.nn.modules.loss.NLLLoss",
        "torch.nn.modules.activation.LogSoftmax", "torch.nn.modules.activation.Softmax",
        "torch.log_softmax", "torch._log_softmax", "torch.softmax", "torch._softmax", "torch._safe_softmax",
        "torch.logsumexp",
        "torch._C._VariableFunctions.log_softmax", "torch._C._VariableFunctions._log_softmax",
        "torch._C._VariableFunctions.softmax", "torch._C._VariableFunctions._softmax",
        "torch._C._VariableFunctions.logsumexp",
        "torch._C._nn.cross_entropy_loss", "torch._C._nn.nll_loss", "torch._C._nn.nll_loss_nd",
        "torch._C._nn.nll_loss2d",
        "torch.Tensor.log_softmax", "torch.Tensor.softmax", "torch.Tensor.logsumexp",
        "torch.special.log_softmax", "torch.special.softmax", "torch.special.logsumexp",
        "torch.ops.aten.cross_entropy_loss", "torch.ops.aten.nll_loss", "torch.ops.aten.nll_loss_nd",
        "torch.ops.aten.log_softmax", "torch.ops.aten._log_softmax", "torch.ops.aten.logsumexp",
        "torch.ops.aten.softmax", "torch.ops.aten._softmax",
        "torch.distributions.Categorical", "torch.distributions.categorical.Categorical",
        "torch._refs",
        "torch._decomp",
        "torch._prims",
        "reference",
    }),
    # Policy: on CUDA the candidate must launch a kernel it compiled (load_inline or Triton); on the CPU
    # it must call into a C++ extension it built. A candidate made only of PyTorch operators is a policy
    # violation. The sandbox enforces this; the task only states it.
    requires_custom_kernel=True,
    # fp32 logits and int64 targets read once, the fp32 scalar written once.
    min_bytes=lambda shape: shape[0] * shape[1] * 4 + shape[0] * 8 + 4,
)
