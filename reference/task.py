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


def generator(seed: int, device: torch.device) -> torch.Generator:
    """A generator on the target device: inputs are drawn where they are used (1 GiB over PCIe is slow)."""
    return torch.Generator(device=device).manual_seed(seed)


def log_uniform(n: int, low: float, high: float, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """n values spread evenly in log space over [low, high]: per-row scales and temperatures."""
    u = torch.rand(n, 1, generator=gen, device=device)
    return torch.exp(torch.log(torch.tensor(low)) + u * (torch.log(torch.tensor(high)) - torch.log(torch.tensor(low))))


ROW_CHUNK_ELEMENTS = 1 << 24
"""Ground truth is computed over row chunks of at most this many elements (128 MiB in fp64)."""


def row_chunks(rows: int, cols: int) -> range:
    step = max(1, ROW_CHUNK_ELEMENTS // max(cols, 1))
    return range(0, rows, step)
