"""A gradient's projection on random weights: the training child reports every row of a step's gradient projected on
weights drawn from a seed the parent sends (sandbox/child/training.py, `grad_check`), and the parent draws the same
weights to project its fp64 truth (sandbox/execution/training.py). Pure functions, same results in both processes.
"""

from __future__ import annotations

import torch

from reference.task import generator, row_chunks


def projection_weights(cols: int, seed: int, device: torch.device) -> torch.Tensor:
    """fp64 weights uniform in [-1, 1), one per column, from a seed: bit-identical in parent and child."""
    return torch.rand(cols, generator=generator(seed, device), dtype=torch.float64, device=device).mul_(2.0).sub_(1.0)


def project_rows(matrix: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """matrix @ weights in fp64, over row chunks (bounds the fp64 copy of a 1 GiB gradient to 128 MiB)."""
    rows, cols = matrix.shape
    chunks = row_chunks(rows, cols)
    return torch.cat([torch.mv(matrix[s:s + chunks.step].double(), weights) for s in chunks]) if rows else \
        torch.zeros(0, dtype=torch.float64, device=matrix.device)
