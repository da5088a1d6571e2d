"""Trusted comparisons on plain data: candidate output bytes vs fp64 ground truth, input fingerprints.

Runs in the parent. The candidate's output arrives as raw bytes with a declared dtype and shape; it is
rebuilt here as a fresh tensor, so nothing the candidate defined (a subclass, an overridden
`__torch_function__`, a patched `allclose`) takes part in the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
           "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32}

FINGERPRINT_PERIOD = 1 << 20
"""Words per period of the position weights: longer than any row, so a permutation inside a row changes
the weighted digest."""
FINGERPRINT_SLAB = 1 << 25
"""Words fingerprinted per step: bounds the temporaries (an int64 copy and its weighted product) to 512 MB,
in few enough steps that launching them costs nothing next to the work."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_from_bytes(data: bytes, dtype: str, shape: list[int]) -> torch.Tensor:
    """Rebuild a tensor from untrusted bytes; raises ValueError when they do not match dtype and shape."""
    if dtype not in _DTYPES:
        raise ValueError(f"unsupported output dtype {dtype}")
    torch_dtype = _DTYPES[dtype]
    numel = 1
    for dim in shape:
        if not isinstance(dim, int) or dim < 0:
            raise ValueError(f"invalid output shape {shape}")
        numel *= dim
    expected = numel * torch.empty((), dtype=torch_dtype).element_size()
    if len(data) != expected:
        raise ValueError(f"output has {len(data)} bytes, expected {expected} for {dtype}{shape}")
    if numel == 0:
        return torch.empty(shape, dtype=torch_dtype)
    return torch.frombuffer(bytearray(data), dtype=torch_dtype).reshape(shape).clone()


def fingerprint(tensors: list[torch.Tensor]) -> list[str]:
    """An exact, order-sensitive digest of each tensor's bits, computed on its device.

    Two sums of the raw 32-bit words, widened to int64: a plain one and one weighted by position, so
    permuting values (sorting a row in place, say) changes the digest. Used to prove the child generated the
    inputs the parent expects and that the candidate left them unmodified. Large slabs against one period
    of precomputed weights: on an H100 the 4M-word chunks this replaced, each with its own weights, took
    24 ms for kl_div's 2 GiB of inputs (docs/results/profile-h100-v2-2026-11-23.log).
    """
    digests = []
    for tensor in tensors:
        words = tensor.detach().contiguous().view(-1).view(torch.int32)
        weights = _position_weights(words.device, min(words.numel(), FINGERPRINT_PERIOD))
        plain = torch.zeros((), dtype=torch.int64, device=words.device)
        weighted = torch.zeros((), dtype=torch.int64, device=words.device)
        for start in range(0, words.numel(), FINGERPRINT_SLAB):
            wide = words[start:start + FINGERPRINT_SLAB].to(torch.int64)
            plain += wide.sum()
            full = wide.numel() // FINGERPRINT_PERIOD * FINGERPRINT_PERIOD
            if full:
                weighted += (wide[:full].view(-1, FINGERPRINT_PERIOD) * weights).sum()
            rest = wide[full:]
            weighted += (rest * weights[:rest.numel()]).sum()
        digests.append(f"{tuple(tensor.shape)}:{tensor.dtype}:{int(plain)}:{int(weighted)}")
    return digests


def _position_weights(device: torch.device, count: int) -> torch.Tensor:
    """The first `count` of the period's int64 weights, in [1, 65521]: a tensor shorter than the period is weighted by
    as many as it has words, the same ones (kl_div's CPU-sized inputs have 32,768: making the whole period, 8 MB, for
    each took 31 ms of the parent's and the child's CPU per fingerprint, most of a CPU judging's timing). Made afresh,
    cheaper than trusting a cached copy the candidate's process could reach."""
    return torch.arange(count, dtype=torch.int64, device=device) % 65521 + 1


@dataclass(frozen=True, kw_only=True)
class Comparison:
    passed: bool
    max_abs_error: float | None
    max_rel_error: float | None
    worst_index: list[int] | None
    expected: float | None
    got: float | None
    message: str | None


def compare(output: torch.Tensor, truth: torch.Tensor, atol: float, rtol: float) -> Comparison:
    """|out - truth| <= atol + rtol*|truth| everywhere, in fp64; NaN or Inf never pass."""
    if tuple(output.shape) != tuple(truth.shape):
        return Comparison(passed=False, max_abs_error=None, max_rel_error=None, worst_index=None, expected=None,
                          got=None,
                          message=f"output shape {list(output.shape)} differs from expected {list(truth.shape)}")
    out = output.to(torch.float64).reshape(-1)
    ref = truth.to(torch.float64).cpu().reshape(-1)
    if out.numel() == 0:
        return Comparison(passed=True, max_abs_error=0.0, max_rel_error=0.0, worst_index=None, expected=None, got=None,
                          message=None)
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        flat = int((~finite).nonzero()[0])
        index = list(torch.unravel_index(torch.tensor(flat), truth.shape)) if truth.dim() else []
        return Comparison(passed=False, max_abs_error=float("inf"), max_rel_error=float("inf"),
                          worst_index=[int(i) for i in index], expected=float(ref[flat]),
                          got=float(out[flat]), message=f"output contains {int((~finite).sum())} NaN/Inf value(s)")
    abs_err = (out - ref).abs()
    rel_err = abs_err / ref.abs().clamp_min(1e-300)
    excess = abs_err - (atol + rtol * ref.abs())
    flat = int(excess.argmax())
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat), truth.shape)] if truth.dim() else []
    passed = bool((excess <= 0).all())
    message = None if passed else (
        f"error {float(abs_err[flat]):.3g} (relative {float(rel_err[flat]):.3g}) exceeds atol {atol:g} + rtol {rtol:g}"
        f" * |expected|: expected {float(ref[flat]):.9g}, got {float(out[flat]):.9g}"
    )
    return Comparison(passed=passed, max_abs_error=float(abs_err.max()), max_rel_error=float(rel_err.max()),
                      worst_index=index, expected=float(ref[flat]), got=float(out[flat]),
                      message=message)
