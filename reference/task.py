"""The `Task` contract: everything the judge needs to know about one KernelBench problem.

A task module (`reference/kl_div.py`, `reference/cross_entropy.py`) builds one `Task`. This module
only defines the shape of that object; it imports nothing from `sandbox/` or `service/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from reference.ids import TaskId


OFFICIAL = "official"
"""Name of the input distribution that reproduces KernelBench's own `get_inputs`."""

Shape = tuple[int, ...]
"""Problem size, e.g. (batch, dim) for kl_div or (batch, num_classes) for cross_entropy."""


@dataclass(frozen=True)
class Tolerance:
    """A candidate output `y` passes against fp64 ground truth `t` when |y - t| <= atol + rtol * |t|."""

    atol: float
    rtol: float
    why: str


@dataclass(frozen=True)
class Training:
    """What makes a task the training variant of a forward task (reference/training.py builds them).

    The candidate's `ModelNew` returns the loss, as in the forward task; the judge then calls
    `loss.backward(scale)` and reads the gradient with respect to input `grad_input` (predictions), which
    must come from the candidate's own code. `scale` (the incoming gradient, as under AMP loss scaling)
    comes from each call's seed (`grad_output_scale`), so a backward that ignores it is wrong.
    """

    forward_task: TaskId
    grad_input: int
    """Index of the input that requires grad (0: predictions)."""
    gradient_truth: Callable[[list[torch.Tensor], int, int], torch.Tensor]
    """(inputs, start, stop) -> fp64 d loss / d inputs[grad_input] for rows start:stop (the caller chunks)."""
    gradient_tolerance: Tolerance
    """Applied elementwise to batch * gradient / scale (per-row units: see reference/training.py):
    |y - t| <= atol + rtol * m, with m from `gradient_magnitude`."""
    gradient_magnitude: Callable[[list[torch.Tensor], int, int, torch.Tensor], torch.Tensor]
    """(inputs, start, stop, truth rows in per-row units) -> the magnitude rtol applies to, elementwise: |truth|,
    or more where an honest fp32 gradient is a difference of larger terms (cross_entropy's softmax - 1)."""
    forward_min_bytes: Callable[[Shape], int]
    """Bytes a perfect forward alone moves: the forward task's speed-of-light numerator."""
    statement: str
    """What the candidate must do beyond the forward task, in words an LLM is shown with the problem."""


@dataclass(frozen=True)
class Task:
    id: TaskId
    title: str
    kernelbench_id: str
    problem_source: str
    """The exact KernelBench module text an LLM is shown."""
    model_cls: type[nn.Module]
    """The reference `Model` (from the verbatim problem module)."""
    official_shape: Shape
    cpu_shape: Shape
    """Small size used when judging on the CPU (tests, CI)."""
    extra_shapes: tuple[Shape, ...]
    """Other sizes, reported separately from the verdict."""
    distributions: tuple[str, ...]
    """Input distribution names; the first is OFFICIAL, the rest are adversarial but inside the domain."""
    make_inputs: Callable[[Shape, str, int, torch.device], list[torch.Tensor]]
    """(shape, distribution, seed, device) -> inputs. Deterministic for a given device and torch build:
    the trusted parent and the sandboxed child regenerate bit-identical inputs from the same seed."""
    ground_truth: Callable[[list[torch.Tensor]], torch.Tensor]
    """fp64 reference result for the given inputs (memory-bounded: works chunk by chunk)."""
    tolerance: Tolerance
    output_shape: Shape
    output_dtype: torch.dtype
    forbidden_aten_ops: frozenset[str]
    """ATen operators a candidate may not execute (e.g. "aten::kl_div")."""
    forbidden_python_names: frozenset[str]
    """Fully qualified Python names a candidate may not reference (e.g. "torch.nn.functional.kl_div")."""
    requires_custom_kernel: bool
    """When True a candidate must run code it compiled itself (a load_inline extension or a Triton kernel)."""
    min_bytes: Callable[[Shape], int]
    """Bytes a perfect kernel must move for this shape (reads + writes): the speed-of-light numerator."""
    cpu_extra_shapes: tuple[Shape, ...] = ()
    """Extra shapes at CPU scale (same purpose as extra_shapes, sized for CI)."""
    timing_distributions: tuple[str, ...] = ()
    """What the timing phase draws each timed call's distribution from, uniformly and afresh per call.
    Empty means all of `distributions`. Both tasks name only "planted" here, and that is deliberate: the
    child must be told what to generate, so the candidate, which runs in the child, can always learn a
    call's distribution name (from the harness's memory). Every timed distribution must therefore be one
    on which no shortcut stays inside the tolerance even when the candidate knows the name; the official
    distribution is not (a 1/64 row sample or the constant-logsumexp trick passes there). "planted" hides
    cells that carry much of the loss at secret positions that neither input reveals to a reader of the
    other (kl_div: predictions pushed down where the targets are ordinary, targets raised where the
    predictions are ordinary; cross_entropy: a large logit away from the target), so knowing the name does
    not say where they are, and reading all of one input and up to 10% of the other (rows, columns, cells,
    or the cells the whole input marks) misses the truth by 11 to hundreds of tolerances in the median, and
    passes a call with a probability of a few percent at most (docs/results/predictability-2026-11-26.md;
    tests/reference/test_planted.py). Every planted trial and timed call is checked. An honest memory-bound kernel
    moves the same bytes whatever the values, so its time is the one it has on the official inputs,
    comparable with KernelBench's."""
    paired_distributions: tuple[str, ...] = ()
    """Distributions whose inputs come from two sub-seeds of the call's seed (`sub_seeds`): the targets
    from one, the predictions (logits) from the other. The correctness schedule gives each such trial a
    partner with the same targets and fresh predictions (`sharing_targets`): an answer that does not
    depend on every prediction, or one cached under the targets, fails one of the two
    (tests/reference/test_paired.py)."""

    training: Training | None = None
    """Set for the training variants (forward + backward): how the gradient is checked. None: forward only."""

    def timed_distributions(self) -> tuple[str, ...]:
        """`timing_distributions`, or every distribution when the task leaves it empty."""
        return self.timing_distributions or self.distributions


def generator(seed: int, device: torch.device) -> torch.Generator:
    """A generator on the target device: inputs are drawn where they are used (1 GiB over PCIe is slow)."""
    return torch.Generator(device=device).manual_seed(seed)


def log_uniform(n: int, low: float, high: float, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """n values spread evenly in log space over [low, high]: per-row scales and temperatures."""
    u = torch.rand(n, 1, generator=gen, device=device)
    return torch.exp(torch.log(torch.tensor(low)) + u * (torch.log(torch.tensor(high)) - torch.log(torch.tensor(low))))


def planted_rows(rows: int, fewest: int, most: int, gen: torch.Generator,
                 device: torch.device) -> tuple[torch.Tensor, int]:
    """(positions, k): k distinct rows at random positions, k uniform in [rows // fewest, rows // most]
    (at least 1 and at most `rows`; at least 2 possible values, so the count itself is never certain).

    The count comes from the seed too, so a candidate cannot scale a sub-sample by a known k. It is drawn on the
    host (`host_count`), not on the device: a count read back from the device (`.item()`) would make the judge
    wait for the device in the middle of making a timed call's inputs, which it does inside the timed round trip
    (sandbox/child/harness.py, `go`), where every such wait is device time the judge cannot attribute.
    """
    low = max(1, rows // fewest)
    high = min(rows, max(low + 1, rows // most))
    k = host_count(low, high, gen, salt=(fewest, most))
    return torch.randperm(rows, generator=gen, device=device)[:k], k


_GOLDEN = 0x9E3779B97F4A7C15


def host_count(low: int, high: int, gen: torch.Generator, salt: tuple[int, ...]) -> int:
    """An integer uniform in [low, high], from a host generator keyed by `gen`'s seed and `salt` (each call site its
    own): the same in every process, and independent of `gen`'s own stream even where `gen` is a CPU generator with
    the same seed (the salt mixes the key)."""
    key = gen.initial_seed()
    for part in salt:
        key = ((key ^ part) * _GOLDEN + 0x632BE59BD9B4E019) % (1 << 63)
    host = torch.Generator().manual_seed(key)
    return low + int(torch.randint(0, high - low + 1, (), generator=host))


SUB_SEED_BITS = 31
"""A 62-bit call seed is two halves; `sub_seeds` mixes them so that every distinct seed has distinct inputs."""
_SUB_SEED_MASK = (1 << SUB_SEED_BITS) - 1


def sub_seeds(seed: int) -> tuple[int, int]:
    """(targets, predictions): the seeds of the two generators a paired distribution draws from.

    With seed = high * 2^31 + low, the targets' key is high XOR low and the predictions' key is low, so
    seeds that differ anywhere differ in their predictions or their targets (small test seeds, high = 0, in
    both), and `sharing_targets` can keep one key while changing the other. The two keys seed generators
    of distinct parity, so the two streams are never the same stream even when the keys are equal.
    """
    low = seed & _SUB_SEED_MASK
    high = (seed >> SUB_SEED_BITS) & _SUB_SEED_MASK
    return ((high ^ low) << 1) | 1, low << 1


def sharing_targets(seed: int, fresh: int) -> int:
    """A seed whose targets are `seed`'s and whose predictions come from `fresh` (both 62-bit seeds).

    Only paired distributions (`Task.paired_distributions`) draw their inputs this way; for the others the
    result is just another seed."""
    low = fresh & _SUB_SEED_MASK
    if low == seed & _SUB_SEED_MASK:  # the same predictions too: move to the next key
        low = (low + 1) & _SUB_SEED_MASK
    key = ((seed >> SUB_SEED_BITS) ^ seed) & _SUB_SEED_MASK
    return ((key ^ low) << SUB_SEED_BITS) | low


def paired_generators(seed: int, device: torch.device) -> tuple[torch.Generator, torch.Generator]:
    """(targets, predictions) generators of a paired distribution, seeded from `sub_seeds(seed)`."""
    targets, predictions = sub_seeds(seed)
    return generator(targets, device), generator(predictions, device)


ROW_CHUNK_ELEMENTS = 1 << 24
"""Ground truth is computed over row chunks of at most this many elements (128 MiB in fp64)."""


def row_chunks(rows: int, cols: int) -> range:
    step = max(1, ROW_CHUNK_ELEMENTS // max(cols, 1))
    return range(0, rows, step)
