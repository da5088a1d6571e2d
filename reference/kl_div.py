"""KernelBench L1-98, KL divergence: `F.kl_div(torch.log(predictions), targets, reduction="batchmean")`.

The problem an LLM is shown is `problems/kl_div.py`, verbatim. This module adds what judging needs: inputs
drawn on the device from a seed (the official distribution and adversarial ones inside the domain), fp64
ground truth, the tolerance, the policy and the bytes a perfect kernel moves.

The domain: both inputs are (batch, dim) fp32 matrices whose rows are probability vectors. Every
prediction is a strictly positive normal fp32 number, so log(predictions) is finite everywhere: each
distribution keeps the predictions' logit spread in a row under 60, except "sparse", whose near-zero
predictions reach ~1e-36 (a spread under 69; e^-69 / 131072 is still normal). Targets are strictly positive
normal numbers too, except in "sparse", where many are exactly 0: there the loss uses the reference's
convention, xlogy(0, 0) - 0 * log(p) = 0, which eager PyTorch also gives, and the fp64 truth is the same
formula (no NaN). Near-identical targets and predictions ("near_identical", a loss ~1e-5) are in the
domain too: it is where the precision of the logarithm shows.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from reference.problems import kl_div as problem
from reference.task import (OFFICIAL, Shape, Task, TaskId, Tolerance, generator, log_uniform, paired_generators,
                            planted_rows, row_chunks)

PROBLEM_SOURCE = Path(problem.__file__).read_text()

MAX_LOGIT_SPREAD = 60.0
"""Largest logit spread within a row; e^-60 / 131072 ~ 7e-32 is still a normal fp32 (min ~1.2e-38)."""


def _official(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # get_inputs(): one scale for the whole predictions matrix, drawn first, then the two matrices in
    # the same order. In-place mul keeps the peak at three 1 GiB buffers instead of four.
    draw = dict(generator=g, device=device)
    scale = torch.rand((), **draw)
    predictions = torch.rand(rows, cols, **draw).mul_(scale).softmax(dim=-1)
    targets = torch.rand(rows, cols, **draw).softmax(dim=-1)
    return [predictions, targets]


def _temperature(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # Every row of each input gets its own temperature, log-uniform over [0.05, 20]: some rows are
    # almost uniform, others put most of their mass on a few entries. Rows are not identically
    # distributed, so estimating the loss from a few rows (or assuming near-uniform rows, as the
    # official inputs are) fails. Logits spread = 3 / T <= 60.
    out = []
    for _ in range(2):
        temperature = log_uniform(rows, 0.05, 20.0, g, device)
        logits = torch.rand(rows, cols, generator=g, device=device).mul_(MAX_LOGIT_SPREAD / 20.0)
        out.append(logits.div_(temperature).softmax(dim=-1))
    return out


def _peaked(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # Low-noise logits; in some rows one entry dominates. Row kinds (randint over 8):
    #   0: predictions peaked, targets flat   -> large KL (targets' mass where predictions are tiny)
    #   1: targets peaked, predictions flat   -> KL ~ log(dim) - H(targets)
    #   2: both peaked at the same entry      -> small KL from a large-magnitude cancellation
    #   3: both peaked at different entries   -> KL ~ peak height
    #   4-7: both flat                        -> tiny KL
    # The peak height log(dim) + U(-2, 8) gives the peak 10% to 99.9% of the row's mass.
    draw = dict(generator=g, device=device)
    predictions = torch.rand(rows, cols, **draw).mul_(0.5)
    targets = torch.rand(rows, cols, **draw).mul_(0.5)
    kind = torch.randint(0, 8, (rows,), **draw)
    peak_p = torch.randint(0, cols, (rows,), **draw)
    peak_t = torch.where(kind == 3, torch.randint(0, cols, (rows,), **draw), peak_p)
    height = torch.rand(rows, **draw).mul_(10.0).add_(math.log(cols) - 2.0)
    row = torch.arange(rows, device=device)
    zero = torch.zeros((), device=device)
    predictions[row, peak_p] += torch.where((kind == 0) | (kind == 2) | (kind == 3), height, zero)
    targets[row, peak_t] += torch.where((kind == 1) | (kind == 2) | (kind == 3), height, zero)
    return [predictions.softmax(dim=-1), targets.softmax(dim=-1)]


def _mismatched(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # Targets favour the entries where predictions are smallest: predictions = softmax(a * u),
    # targets = softmax(b * (1 - u) + noise), with per-row sharpness a in [4, 40] and b in [2, 15].
    # KL(targets || predictions) is then several times KL(predictions || targets), so a kernel that
    # swaps the arguments, or drops the t*log(t) term, is far off (the official near-uniform inputs
    # hide this: there the two directions agree within 2%).
    u = torch.rand(rows, cols, generator=g, device=device)
    a = log_uniform(rows, 4.0, 40.0, g, device)
    b = log_uniform(rows, 2.0, 15.0, g, device)
    noise = torch.rand(rows, cols, generator=g, device=device)
    predictions = (u * a).softmax(dim=-1)
    targets = torch.rsub(u, 1.0).mul_(b).add_(noise).softmax(dim=-1)
    return [predictions, targets]


PLANTED_NOISE = (0.003, 0.03)
"""Per-row scale of the Gaussian noise between the planted inputs' logits (log-uniform): a row's base loss is
~noise^2 / 2, 5e-6..5e-4, so the hidden cells below carry most of the loss (~4e-4 a row at 16384 columns)."""
PLANTED_DEPTH = (20.0, 55.0)
"""How far a hidden prediction logit is pushed down: t log(t / p) there is ~depth / dim. Spread <= 56 + noise."""
PLANTED_BUMP = (2.0, 4.0)
"""How far a hidden target logit is raised: that entry holds e^bump / dim of its row, ~bump e^bump / dim of loss."""


def _planted(rows: int, cols: int, seed: int, device: torch.device) -> list[torch.Tensor]:
    # Targets are official targets, softmax(U[0, 1)), except for R/48..R/12 rows (count and positions from
    # the seed) in which one entry's logit is raised by U(2, 4). Predictions are the targets' logits without
    # those bumps, plus Gaussian noise of a per-row scale (PLANTED_NOISE), with R/32..R/8 rows in which one
    # entry's logit is pushed down by U(20, 55). Value by value both inputs look official (every entry within
    # [0.55, 1.7] / dim but the hidden ones), and the loss is mostly the hidden cells', at positions that the
    # other input does not reveal:
    #   - a reader of all the targets and a fraction of the predictions cannot find the pushed-down
    #     predictions (the targets there are ordinary) and cannot infer them from the row: the noise hides
    #     what one missing entry does to the row's normalisation. It sees the same fraction of them, a
    #     random count with random depths, and misses the truth by 11..16 tolerances in the median at 10%
    #     read, 43..54 at 1%, ~100 at 0.1% (official shape; docs/results/predictability-2026-11-26.md,
    #     tests/reference/test_planted.py);
    #   - a reader of all the predictions and a fraction of the targets cannot find the raised targets;
    #   - reading a fraction of the rows or columns of both misses both.
    # Away from the hidden cells the loss is the noise's, ~noise^2 / 2 per row: a known law, which a fraction
    # of the row estimates well, so it is kept small. Targets come from one sub-seed, the noise and the
    # pushed-down cells from the other (reference.task.sub_seeds): the correctness schedule pairs two trials
    # with the same targets and fresh predictions.
    targets_gen, predictions_gen = paired_generators(seed, device)
    draw = dict(generator=targets_gen, device=device)
    logits = torch.rand(rows, cols, **draw)
    bumped, n = planted_rows(rows, 48, 12, targets_gen, device)
    bump_column = torch.randint(0, cols, (n,), **draw)
    bump = torch.rand(n, **draw).mul_(PLANTED_BUMP[1] - PLANTED_BUMP[0]).add_(PLANTED_BUMP[0])
    logits[bumped, bump_column] += bump
    targets = logits.softmax(dim=-1)
    logits[bumped, bump_column] -= bump  # the predictions do not see the bumps (to within fp32 rounding)
    draw = dict(generator=predictions_gen, device=device)
    noise = log_uniform(rows, *PLANTED_NOISE, predictions_gen, device)
    logits.add_(torch.randn(rows, cols, **draw).mul_(noise))
    deep, n = planted_rows(rows, 32, 8, predictions_gen, device)
    deep_column = torch.randint(0, cols, (n,), **draw)
    logits[deep, deep_column] -= torch.rand(n, **draw).mul_(PLANTED_DEPTH[1] - PLANTED_DEPTH[0]).add_(PLANTED_DEPTH[0])
    return [logits.softmax(dim=-1), targets]


NEAR_IDENTICAL_NOISE = (3e-3, 1e-2)
"""Scale of the noise between the two inputs' logits (log-uniform, one per seed): the loss is ~noise^2 / 2,
4.5e-6..5e-5, 15x atol or more, so that returning 0 fails."""


NEAR_IDENTICAL_JITTER = 1e-4
"""Per-row, per-entry Gaussian jitter on the shared logits: far under bf16's spacing of logarithms (>= 2^-8 of them),
far over fp32's (2^-24), so roundings to bf16 agree from row to row and roundings to fp32 do not."""


def _near_identical(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # One row of logits and one row of differences: targets softmax(s U + jitter) and predictions
    # softmax(s U + jitter + noise * Z), with s log-uniform over [0.5, 8] and noise over NEAR_IDENTICAL_NOISE,
    # the same in every row but for the jitter. The loss is second order in the noise while each term
    # t (log t - log p) is first order and of either sign, so an error in the logarithm far below the terms'
    # size is not below the loss's. That the rows hold nearly the same values is what makes such errors count:
    # a logarithm rounded to bf16 rounds every row alike, so its error does not average out over the batch (it
    # would at the official size with independent rows), and misses by hundreds of tolerances, while fp32's
    # rounding errors differ from row to row (the jitter) and average out, as they do on any other inputs:
    # every honest arrangement stays inside (tests/reference/test_precision.py). atol (3e-7) is what makes this
    # a test at all. Not a test of partial work: a row is the batch here.
    draw = dict(generator=g, device=device)
    base = torch.rand(cols, **draw).mul_(log_uniform(1, 0.5, 8.0, g, device)[0])
    difference = torch.randn(cols, **draw).mul_(log_uniform(1, *NEAR_IDENTICAL_NOISE, g, device)[0])
    logits = torch.randn(rows, cols, **draw).mul_(NEAR_IDENTICAL_JITTER).add_(base)
    targets = logits.softmax(dim=-1)
    return [logits.add_(difference).softmax(dim=-1), targets]


SPARSE_ZEROS = (0.1, 0.9)
"""Fraction of each row's targets that are exactly 0 (uniform per row; one entry a row always stays positive)."""
SPARSE_DEPTH = (30.0, 65.0)
"""How far the near-zero predictions' logits sit below the rest (<= 4): p >= e^-69 / 131072 ~ 8e-36, a normal
fp32, so t / p stays under ~1e36 (a gradient times a loss scale is far from fp32's max, 3.4e38)."""


def _sparse(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # Targets with exact zeros: per row a uniform fraction in SPARSE_ZEROS of the entries is 0 (softmax of
    # -inf), the rest softmax(4 U). Predictions near zero: per row a uniform fraction in [0.1, 0.5] of the
    # logits is pushed down by U(30, 65), so those probabilities are 1e-36..1e-14, normal fp32 numbers, the
    # rest softmax(4 U). The two sets are independent: some near-zero predictions meet positive targets (a
    # term t log(t / p) of ~t * 50), others meet zeros, where the reference's terms are xlogy(0, 0) - 0 * log p
    # = 0 (eager PyTorch gives the same, finite, in fp32). What this catches: 0 * log 0 computed as NaN, a
    # logarithm of max(p, eps) or of p + eps (the large terms vanish), half precision (p underflows to 0).
    draw = dict(generator=g, device=device)
    zero = torch.rand(rows, cols, **draw) < torch.rand(rows, 1, **draw).mul_(SPARSE_ZEROS[1] - SPARSE_ZEROS[0]).add_(
        SPARSE_ZEROS[0])
    zero[torch.arange(rows, device=device), torch.randint(0, cols, (rows,), **draw)] = False
    targets = torch.rand(rows, cols, **draw).mul_(4.0).masked_fill_(zero, -math.inf).softmax(dim=-1)
    del zero
    logits = torch.rand(rows, cols, **draw).mul_(4.0)
    tiny = torch.rand(rows, cols, **draw) < torch.rand(rows, 1, **draw).mul_(0.4).add_(0.1)
    depth = torch.rand(rows, cols, **draw).mul_(SPARSE_DEPTH[1] - SPARSE_DEPTH[0]).add_(SPARSE_DEPTH[0])
    logits.sub_(depth.mul_(tiny))
    return [logits.softmax(dim=-1), targets]


GENERATORS = {OFFICIAL: _official, "temperature": _temperature, "peaked": _peaked, "mismatched": _mismatched,
              "near_identical": _near_identical, "sparse": _sparse}
"""One generator per input distribution: (rows, cols, generator, device) -> [predictions, targets]."""
PAIRED = {"planted": _planted}
"""Distributions drawn from two sub-seeds of the seed (reference.task.sub_seeds): (rows, cols, seed, device)."""
DISTRIBUTIONS = (*GENERATORS, *PAIRED)


def make_inputs(shape: Shape, distribution: str, seed: int, device: torch.device) -> list[torch.Tensor]:
    """[predictions, targets]: fp32 (batch, dim), rows non-negative, summing to one; predictions strictly positive.

    Drawn on `device` from a generator seeded with `seed` (two, for the paired distributions): the same
    (shape, distribution, seed, device) gives bit-identical tensors in any process. On the CPU the official
    distribution is bit-identical to `torch.manual_seed(seed); get_inputs()` at that size
    (tests/reference/test_inputs.py checks it).
    """
    rows, cols = shape
    if distribution in PAIRED:
        return PAIRED[distribution](rows, cols, seed, device)
    if distribution not in GENERATORS:
        raise ValueError(f"unknown kl_div distribution {distribution!r}; known: {', '.join(DISTRIBUTIONS)}")
    return GENERATORS[distribution](rows, cols, generator(seed, device), device)


def ground_truth(inputs: list[torch.Tensor]) -> torch.Tensor:
    """The reference loss in fp64: sum(xlogy(t, t) - t * log(p)) / batch, as a 0-dim tensor.

    Same pointwise formula as `F.kl_div(log(p), t)` (xlogy makes a zero target contribute 0, as torch
    does), but with log(p) taken in fp64. Computed over row chunks so that the official 2 x 1 GiB fp32
    inputs never get a full fp64 copy.
    """
    predictions, targets = inputs
    rows, cols = predictions.shape
    chunks = row_chunks(rows, cols)
    total = torch.zeros((), dtype=torch.float64, device=predictions.device)
    for start in chunks:
        p = predictions[start:start + chunks.step].double()
        t = targets[start:start + chunks.step].double()
        total += (torch.xlogy(t, t) - t * torch.log(p)).sum()
    return total / rows


TASK = Task(
    id=TaskId.KL_DIV,
    title="KL divergence (batchmean)",
    kernelbench_id="L1-98",
    problem_source=PROBLEM_SOURCE,
    model_cls=problem.Model,
    official_shape=(problem.batch_size, problem.input_shape[0]),
    cpu_shape=(64, 512),
    # Odd widths (not multiples of 4 or 32: vector loads need a tail), very wide rows, many short rows.
    extra_shapes=((4096, 16383), (128, 131072), (65536, 1000)),
    cpu_extra_shapes=((33, 1023), (4, 8195), (1000, 37)),
    distributions=DISTRIBUTIONS,
    timing_distributions=("planted",),
    paired_distributions=("planted",),
    make_inputs=make_inputs,
    ground_truth=ground_truth,
    # --- judging metadata ------------------------------------------------------------------------
    # The output is one scalar; y passes when |y - t| <= atol + rtol * |t| against fp64 truth t.
    # Measured error of honest fp32 computations vs fp64 truth (scripts/gpu/measure_tolerance.py; worst
    # over 3 seeds, 2 at 16384x16384 on the CPU). torch = the reference Model in fp32; block = a
    # one-block-per-row kernel (256 strided sequential partial sums, a tree, then the row results added
    # one by one into one fp32 scalar, as an atomicAdd does); naive = each row summed left to right,
    # then the row sums left to right. Max relative error:
    #
    #                                  official  temperature  peaked   mismatched
    #   CPU (x86, torch 2.13)
    #     64x512        torch           1.1e-07    1.5e-07    7.7e-08   4.2e-08
    #                   block / naive   3.2e-07    2.7e-07    2.8e-07   1.5e-07
    #     2048x16384    torch           3.2e-08    6.9e-08    3.0e-08   1.8e-07
    #                   block / naive   1.0e-06    1.4e-06    8.3e-06   5.5e-06
    #     16384x16384   torch           5.8e-08    5.2e-08    7.2e-08   1.1e-08
    #                   block / naive   5.9e-06    1.2e-06    3.1e-05   6.6e-06
    #   H100 (torch 2.11, CUDA 13.0)
    #     16384x16384   torch           5.3e-08    7.5e-08    5.1e-08   8.1e-08
    #                   block / naive   2.7e-06    3.1e-06    3.6e-05   3.6e-06
    #     4096x16383    block / naive   2.1e-06    6.8e-07    8.4e-06   5.0e-06
    #     128x131072    block / naive   1.3e-06    1.0e-05    1.3e-04   4.3e-05
    #     65536x1000    block / naive   5.7e-06    7.1e-06    1.3e-04   3.4e-06
    #   (torch fp32 stays <= 2e-7 at every shape for these four distributions, CPU and H100.)
    #   planted, near_identical and sparse (issue 25, 3 seeds): max relative / absolute error
    #                                   planted             near_identical      sparse
    #   CPU (x86, torch 2.13)
    #     64x512        torch           9.4e-07 / 5.5e-09   3.0e-03 / 1.9e-08   8.4e-08 / 1.3e-06
    #                   block / naive   5.5e-07 / 2.7e-09   3.6e-03 / 2.2e-08   1.3e-07 / 2.1e-06
    #     4x8195        torch           6.3e-06 / 1.6e-08   2.3e-03 / 1.7e-08   4.7e-08 / 5.4e-07
    #                   block / naive   5.2e-06 / 1.4e-08   3.0e-03 / 2.3e-08   6.0e-07 / 8.0e-06
    #     2048x16384    torch           1.4e-05 / 3.3e-09   2.2e-04 / 3.0e-09   7.4e-08 / 1.2e-06
    #                   block / naive   1.3e-06 / 6.8e-10   1.7e-04 / 3.6e-09   1.2e-06 / 2.0e-05
    #   H200 (torch 2.11, CUDA 13.0; 2 seeds; docs/results/predictability-2026-11-26.md)
    #     16384x16384   torch           1.2e-07 / 3.4e-11   7.4e-05 / 4.6e-10   2.8e-08 / 4.4e-07
    #                   block / naive   2.6e-06 / 1.2e-09   9.0e-05 / 5.6e-10   4.8e-07 / 7.5e-06
    #     128x131072    block / naive   3.3e-06 / 3.9e-10   3.6e-03 / 2.2e-08   6.6e-07 / 1.1e-05
    #     65536x1000    block / naive   6.6e-05 / 3.6e-07   5.7e-05 / 3.6e-10   1.8e-06 / 2.9e-05
    #   (eager PyTorch on the CPU carries an absolute error of ~3e-9..2e-8 on the small losses whatever their
    #   size, which is what makes its relative error on planted and near_identical larger than elsewhere.)
    #
    # The honest error is dominated by accumulating in fp32: on "peaked", half the rows have KL ~0.01
    # while the running total is ~1e4..1e5, so each small row (or, in long rows, each small term) loses
    # most of its bits when added. That reaches 1.3e-4 relative at 65536 rows or 131072 columns, and
    # the bound for n sequential fp32 additions, ~n * 2^-24, is 1e-3 at n = 16384. rtol 1e-4 would
    # fail such honest kernels, so rtol is 1e-3: ~8x the worst measured honest error, 28x the worst at
    # the official shape, 10x tighter than KernelBench. It still rejects the wrong answers KernelBench
    # lets through: the reversed divergence KL(p||q) is off by 2x or more on "mismatched" (on official
    # inputs it is off by only 5e-4..1.7e-2, inside KernelBench's 1e-2 on every seed).
    #
    # atol only matters where the loss is near 0, which only "near_identical" is (~1e-5 a batch; planted's
    # ~4e-4 is next, every other loss is >= 0.01 and its rtol term >= 1e-5). There the terms t log(t / p) are
    # ~noise * t of either sign and sum to ~noise^2 / 2, so an honest fp32 error that is relative to the
    # terms is large relative to the loss: up to 3.6e-3, 2.3e-8 absolute, for fp32 row sums (table above). So
    # rtol alone would fail honest kernels there, and an atol of 1e-6 would pass
    # anything within 1e-6 of a 1e-5 loss, 0 included. atol 3e-7 is ~13x the worst honest absolute error
    # measured, while the wrong answers it must catch are far outside it: returning 0 is off by the loss
    # (4.5e-6 or more, >= 15x), logarithms rounded to bf16 by hundreds of tolerances at every shape
    # (tests/reference/test_precision.py; 286x for tests/corpus/hostile/cuda/c11_kl_bf16_log.py on the H200).
    tolerance=Tolerance(
        atol=3e-7,
        rtol=1e-3,
        why="~8x the worst measured error of honest fp32 kernels (fp32 accumulation of row sums) vs fp64 truth; "
            "atol ~13x their worst absolute error on near-identical inputs (loss ~1e-5)",
    ),
    output_shape=(),
    output_dtype=torch.float32,
    # The whole reference is one ATen operator. log, xlogy, mul, sub and sum are the building blocks a
    # kernel is expected to reimplement, so they stay allowed.
    forbidden_aten_ops=frozenset({"aten::kl_div"}),
    # Every Python path to that operator in torch 2.x, plus the distributions package's KL between
    # Categoricals (pure tensor ops: the run-time aten tripwire would not see it), PyTorch's Python
    # decompositions/references (same reason) and the judge's own package.
    forbidden_python_names=frozenset({
        "torch.nn.functional.kl_div",
        "torch.kl_div",
        "torch._C._VariableFunctions.kl_div",
        "torch.ops.aten.kl_div",
        "torch.nn.KLDivLoss",
        "torch.nn.modules.loss.KLDivLoss",
        "torch.nn.modules.KLDivLoss",
        "torch.distributions.kl_divergence",
        "torch.distributions.kl.kl_divergence",
        "torch._refs",
        "torch._decomp",
        "torch._prims",
        "reference",
    }),
    # Policy: on CUDA the candidate must launch a kernel it compiled (load_inline or Triton); on the CPU
    # it must call into a C++ extension it built. A candidate made only of PyTorch operators is a policy
    # violation. The sandbox enforces this; the task only states it.
    requires_custom_kernel=True,
    # Both fp32 matrices read once, the fp32 scalar written once.
    min_bytes=lambda shape: 2 * shape[0] * shape[1] * 4 + 4,
)
