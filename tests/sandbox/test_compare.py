"""Trusted comparison and fingerprints."""

import math

import pytest
import torch

from sandbox.shared.compare import FINGERPRINT_PERIOD, compare, fingerprint, tensor_from_bytes


def test_scalar_within_and_outside_tolerance():
    truth = torch.tensor(8.3178, dtype=torch.float64)
    assert compare(torch.tensor(8.3179), truth, atol=0.0, rtol=1e-4).passed
    result = compare(torch.tensor(8.33), truth, atol=0.0, rtol=1e-4)
    assert not result.passed and "expected 8.3178" in result.message and result.max_rel_error > 1e-3


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_inf_never_pass(bad):
    result = compare(torch.tensor(bad), torch.tensor(1.0, dtype=torch.float64), atol=math.inf, rtol=math.inf)
    assert not result.passed and "NaN/Inf" in result.message


def test_shape_mismatch_fails():
    result = compare(torch.zeros(3), torch.tensor(0.0, dtype=torch.float64), atol=1, rtol=1)
    assert not result.passed and "shape" in result.message


def test_tensor_from_bytes_checks_size_and_dtype():
    t = torch.tensor([1.5, 2.5])
    assert torch.equal(tensor_from_bytes(t.numpy().tobytes(), "float32", [2]), t)
    with pytest.raises(ValueError, match="bytes"):
        tensor_from_bytes(b"\x00" * 7, "float32", [2])
    with pytest.raises(ValueError, match="unsupported"):
        tensor_from_bytes(b"", "object", [])


def _fingerprint_with_the_whole_period(tensor: torch.Tensor) -> str:
    """The digest as the judge made it before it weighted a short tensor by its own length of weights."""
    words = tensor.contiguous().view(-1).view(torch.int32).to(torch.int64)
    weights = torch.arange(FINGERPRINT_PERIOD, dtype=torch.int64) % 65521 + 1
    numel = words.numel()
    full = numel // FINGERPRINT_PERIOD * FINGERPRINT_PERIOD
    periods, rest = words[:full].view(-1, FINGERPRINT_PERIOD), words[full:]
    weighted = (periods * weights).sum() + (rest * weights[:numel - full]).sum()
    return f"{tuple(tensor.shape)}:{tensor.dtype}:{int(words.sum())}:{int(weighted)}"


@pytest.mark.parametrize("numel", [1, 3000, FINGERPRINT_PERIOD - 1, FINGERPRINT_PERIOD, 2 * FINGERPRINT_PERIOD + 7])
def test_a_fingerprint_is_the_digest_of_the_whole_periods_weights(numel: int) -> None:
    """Weights made only as far as a tensor reaches give the digest the whole period gave, short or long."""
    x = torch.randn(numel)
    assert fingerprint([x]) == [_fingerprint_with_the_whole_period(x)]


def test_fingerprint_sees_permutations_and_single_bit_flips():
    x = torch.rand(64, 33)
    base = fingerprint([x])
    assert fingerprint([x.clone()]) == base
    assert fingerprint([x.flip(1)]) != base  # same multiset of values, other order
    y = x.clone()
    y.view(-1).view(torch.int32)[5] ^= 1
    assert fingerprint([y]) != base
    targets = torch.arange(10)
    assert fingerprint([targets]) != fingerprint([targets.flip(0)])  # int64 targets are covered too
