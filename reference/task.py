"""The `Task` contract: everything the judge needs to know about one KernelBench problem.

A task module (`reference/kl_div.py`, `reference/cross_entropy.py`) builds one `Task`. This module
only defines the shape of that object; it imports nothing from `sandbox/` or `service/`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


class TaskId(str, enum.Enum):
    """Every task the judge knows, defined once."""

    KL_DIV = "kl_div"
    CROSS_ENTROPY = "cross_entropy"
    KL_DIV_TRAIN = "kl_div_train"
    CROSS_ENTROPY_TRAIN = "cross_entropy_train"


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
    distribution is not (a 1/64 row sample or the constant-logsumexp trick passes there). "planted" is
    official-looking everywhere except a few rows at secret positions that carry much of the loss, so
    knowing the name does not say where they are, and skipping any fixed fraction fails
    (tests/reference/test_planted.py). An honest memory-bound kernel moves the same bytes whatever the
    values, so its time is the one it has on the official inputs, comparable with KernelBench's."""

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

    The count comes from the seed too, so a candidate cannot scale a sub-sample by a known k. One
    scalar leaves the device (`.item()`): the count must be a Python int to index with.
    """
    low = max(1, rows // fewest)
    high = min(rows, max(low + 1, rows // most))
    k = int(torch.randint(low, high + 1, (), generator=gen, device=device).item())
    return torch.randperm(rows, generator=gen, device=device)[:k], k


ROW_CHUNK_ELEMENTS = 1 << 24
"""Ground truth is computed over row chunks of at most this many elements (128 MiB in fp64)."""


def row_chunks(rows: int, cols: int) -> range:
    step = max(1, ROW_CHUNK_ELEMENTS // max(cols, 1))
    return range(0, rows, step)
