"""KernelBench L1-98, KL divergence: `F.kl_div(torch.log(predictions), targets, reduction="batchmean")`.

The problem an LLM is shown is `problems/kl_div.py`, verbatim. This module adds what judging needs: inputs
drawn on the device from a seed (the official distribution and adversarial ones inside the domain), fp64
ground truth, the tolerance, the policy and the bytes a perfect kernel moves.

The domain: both inputs are (batch, dim) fp32 matrices whose rows are probability vectors. Every
distribution here keeps each row's logit spread under 60 before the softmax, so every probability is a
strictly positive normal fp32 number (>= e^-60 / dim ~ 1e-31): log(predictions) is finite everywhere and
the loss never depends on the 0 * log 0 convention, exactly as with the official inputs.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from reference.problems import kl_div as problem
from reference.task import (OFFICIAL, Shape, Task, TaskId, Tolerance, generator, log_uniform, planted_rows,
                            row_chunks)

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


PLANTED_DEPTH = (10.0, 50.0)
"""How far the hidden entry's prediction logit is pushed down; the spread stays <= 51 < MAX_LOGIT_SPREAD."""
PLANTED_BUMP = (-4.0, 3.0)
"""The hidden entry's target logit is raised by log(dim) + U(-4, 3): 1% to 92% of its row's mass."""


def _planted(rows: int, cols: int, g: torch.Generator, device: torch.device) -> list[torch.Tensor]:
    # Official inputs (the same draws as `_official`, so every other row is bit-identical to the
    # official row of this seed) with a few planted rows at random positions. In a planted row one
    # random entry gets most of the loss: the target's logit there is raised and the prediction's is
    # pushed far down, so t log(t / p) at that entry is ~1..55 while a whole official row's KL is
    # ~0.045. Between R/1024 and R/128 rows are planted (at least 1): they carry 20%..95% of the
    # loss. What this defeats (tests/reference/test_planted.py measures it):
    #   - reading a fixed fraction of the rows, or a prefix, and scaling up: the planted rows read
    #     are a random count, with random weights, so the estimate misses the truth by far more than
    #     the tolerance on (nearly) every seed; reading a fraction of the columns misses the hidden
    #     entry;
    #   - recognising "official" inputs cheaply: away from the planted rows every value is official,
    #     so a test of a few sampled values or rows sees official inputs unless it happens to sample
    #     a planted row (finding one costs reading ~R/k rows, 1/128 of the data or more).
    draw = dict(generator=g, device=device)
    scale = torch.rand((), **draw)
    logit_p = torch.rand(rows, cols, **draw).mul_(scale)
    logit_t = torch.rand(rows, cols, **draw)
    picked, n = planted_rows(rows, 1024, 128, g, device)
    column = torch.randint(0, cols, (n,), **draw)
    depth = torch.rand(n, **draw).mul_(PLANTED_DEPTH[1] - PLANTED_DEPTH[0]).add_(PLANTED_DEPTH[0])
    bump = torch.rand(n, **draw).mul_(PLANTED_BUMP[1] - PLANTED_BUMP[0]).add_(PLANTED_BUMP[0] + math.log(cols))
    logit_p[picked, column] -= depth
    logit_t[picked, column] += bump
    return [logit_p.softmax(dim=-1), logit_t.softmax(dim=-1)]


GENERATORS = {OFFICIAL: _official, "temperature": _temperature, "peaked": _peaked, "mismatched": _mismatched,
              "planted": _planted}
"""One generator per input distribution: (rows, cols, generator, device) -> [predictions, targets]."""
DISTRIBUTIONS = tuple(GENERATORS)


def make_inputs(shape: Shape, distribution: str, seed: int, device: torch.device) -> list[torch.Tensor]:
    """[predictions, targets]: fp32 (batch, dim), rows strictly positive and summing to one.

    Drawn on `device` from a generator seeded with `seed`: the same (shape, distribution, seed, device)
    gives bit-identical tensors in any process. On the CPU the official distribution is bit-identical to
    `torch.manual_seed(seed); get_inputs()` at that size (tests/reference/test_inputs.py checks it).
    """
    if distribution not in GENERATORS:
        raise ValueError(f"unknown kl_div distribution {distribution!r}; known: {', '.join(DISTRIBUTIONS)}")
    rows, cols = shape
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
    make_inputs=make_inputs,
    ground_truth=ground_truth,
    # --- judging metadata ------------------------------------------------------------------------
    # The output is one scalar; y passes when |y - t| <= atol + rtol * |t| against fp64 truth t.
    # Measured error of honest fp32 computations vs fp64 truth (scripts/measure_tolerance.py; worst
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
    #   (torch fp32 stays <= 2e-7 at every shape and distribution, CPU and H100.)
    #   planted (added for issue 7; CPU, torch 2.13, 3 seeds, 2026-11-23; not yet measured on a GPU):
    #     64x512        torch 2.0e-07   block 1.7e-07   naive 2.6e-07
    #     2048x16384    torch 1.1e-07   block 8.0e-07   naive 5.4e-06
    #   the planted rows' large terms do not worsen honest error: the table's conclusion stands.
    #
    # The honest error is dominated by accumulating in fp32: on "peaked", half the rows have KL ~0.01
    # while the running total is ~1e4..1e5, so each small row (or, in long rows, each small term) loses
    # most of its bits when added. That reaches 1.3e-4 relative at 65536 rows or 131072 columns, and
    # the bound for n sequential fp32 additions, ~n * 2^-24, is 1e-3 at n = 16384. rtol 1e-4 would
    # fail such honest kernels, so rtol is 1e-3: ~8x the worst measured honest error, 28x the worst at
    # the official shape, 10x tighter than KernelBench. It still rejects the wrong answers KernelBench
    # lets through: the reversed divergence KL(p||q) is off by 2x or more on "mismatched" (on official
    # inputs it is off by only 5e-4..1.7e-2, inside KernelBench's 1e-2 on every seed). atol 1e-6 only
    # keeps a loss near 0 from demanding impossible relative accuracy; the official loss is ~0.045.
    tolerance=Tolerance(
        atol=1e-6,
        rtol=1e-3,
        why="~8x the worst measured error of honest fp32 kernels (fp32 accumulation of row sums) vs fp64 truth",
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
