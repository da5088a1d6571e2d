"""Input generation: deterministic from a seed, inside the reference's domain, official = get_inputs."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reference import OFFICIAL, Task, TaskId, all_tasks, get_task

from .conftest import CPU, task_distribution_params, task_params, verbatim_get_inputs

REPO = Path(__file__).resolve().parents[2]


def _digest(tensors: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _all_digests(seed: int) -> dict[str, str]:
    return {f"{task.id.value}/{d}": _digest(task.make_inputs(task.cpu_shape, d, seed, CPU))
            for task in all_tasks() for d in task.distributions}


@pytest.mark.parametrize(("task", "distribution"), task_distribution_params())
def test_same_seed_same_bits_other_seed_other_values(task: Task, distribution: str) -> None:
    a = task.make_inputs(task.cpu_shape, distribution, 7, CPU)
    b = task.make_inputs(task.cpu_shape, distribution, 7, CPU)
    c = task.make_inputs(task.cpu_shape, distribution, 8, CPU)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])


@pytest.mark.slow  # a fresh interpreter
def test_bit_identical_in_another_process() -> None:
    # The trusted parent and the sandboxed child each regenerate the inputs from the seed.
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from tests.reference.test_inputs import _all_digests; print(json.dumps(_all_digests(12345)))"
    )
    out = subprocess.run([sys.executable, "-c", script, str(REPO)], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == _all_digests(12345)


def test_global_rng_untouched() -> None:
    # Generation uses its own generator: it neither reads nor advances torch's global RNG.
    torch.manual_seed(3)
    before = torch.get_rng_state()
    for task in all_tasks():
        for d in task.distributions:
            task.make_inputs(task.cpu_shape, d, 1, CPU)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("task", task_params())
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_official_is_bit_identical_to_verbatim_get_inputs_on_cpu(task: Task, seed: int) -> None:
    # A CPU torch.Generator seeded with s draws the same stream as torch.manual_seed(s), so the official
    # distribution must reproduce the problem's own get_inputs exactly, at any size.
    for shape in (task.cpu_shape, *task.cpu_extra_shapes):
        torch.manual_seed(seed)
        expected = verbatim_get_inputs(task, shape)()
        got = task.make_inputs(shape, OFFICIAL, seed, CPU)
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == e.dtype and g.shape == e.shape
            assert torch.equal(g, e)


def test_official_value_ranges_match_get_inputs() -> None:
    # The statistics a kernel writer would rely on: kl_div rows are softmaxes of logits spread < 1 (so
    # every entry is within a factor e of 1/dim); cross_entropy logits in [0, 1), targets over all classes.
    kl = get_task("kl_div")
    for seed in range(5):
        p, t = kl.make_inputs((64, 512), OFFICIAL, seed, CPU)
        for x in (p, t):
            assert float((x * 512).log().abs().max()) < 1.0
    ce = get_task("cross_entropy")
    x, y = ce.make_inputs((512, 256), OFFICIAL, 0, CPU)
    assert float(x.min()) >= 0.0 and float(x.max()) < 1.0 and abs(float(x.mean()) - 0.5) < 0.01
    assert int(y.min()) == 0 and int(y.max()) == 255


def _kl_domain(p: torch.Tensor, t: torch.Tensor, shape: tuple[int, int], distribution: str) -> None:
    tiny = torch.finfo(torch.float32).tiny
    for x in (p, t):
        assert x.dtype == torch.float32 and tuple(x.shape) == shape and x.is_contiguous()
        assert bool(torch.isfinite(x).all())
        assert float((x.double().sum(1) - 1).abs().max()) <= 1e-5
    # Predictions: no zeros, no subnormals, so log(predictions) is finite and exact; a logit spread <= 60
    # (<= 69 for "sparse", whose near-zero predictions are the point).
    assert float(p.min()) >= tiny
    log_p = p.double().log()
    assert float((log_p.amax(1) - log_p.amin(1)).max()) <= (69.5 if distribution == "sparse" else 60.5)
    # Targets: the same, except the exact zeros of "sparse" (xlogy(0, 0) = 0 in the reference).
    positive = t[t > 0]
    assert float(positive.min()) >= tiny
    assert distribution == "sparse" or positive.numel() == t.numel()
    assert bool(((t > 0).sum(1) > 0).all())


def _ce_domain(x: torch.Tensor, y: torch.Tensor, shape: tuple[int, int], distribution: str) -> None:
    from reference.cross_entropy import LARGE_SHIFT, MAX_ABS_LOGIT

    bound = LARGE_SHIFT[1] + 50.0 if distribution == "large_logits" else MAX_ABS_LOGIT
    assert x.dtype == torch.float32 and tuple(x.shape) == shape and x.is_contiguous()
    assert bool(torch.isfinite(x).all()) and float(x.abs().max()) <= bound < 1024.0
    assert y.dtype == torch.int64 and tuple(y.shape) == (shape[0],)
    assert int(y.min()) >= 0 and int(y.max()) < shape[1]


@pytest.mark.parametrize(("task", "distribution"), task_distribution_params())
def test_inputs_stay_in_the_reference_domain(task: Task, distribution: str) -> None:
    check = _kl_domain if task.id is TaskId.KL_DIV else _ce_domain
    for shape in (task.cpu_shape, *task.cpu_extra_shapes):
        for seed in (0, 1):
            check(*task.make_inputs(shape, distribution, seed, CPU), shape, distribution)


def _row_entropy(p: torch.Tensor) -> torch.Tensor:
    p = p.double()
    return -torch.xlogy(p, p).sum(1)  # 0 log 0 = 0: "sparse" has zero targets


@pytest.mark.parametrize("distribution", [d for d in get_task("kl_div").distributions[1:]
                                          if d not in ("planted", "near_identical")])
def test_kl_adversarial_rows_are_not_identically_distributed(distribution: str) -> None:
    # Official rows all have entropy within ~0.05 nats of log(dim); adversarial ones spread over nats.
    # ("planted" is official-looking on purpose: tests/reference/test_planted.py covers it; "near_identical"
    # repeats one pair of rows on purpose: tests/reference/test_precision.py covers it.)
    task = get_task("kl_div")
    p0, t0 = task.make_inputs((256, 512), OFFICIAL, 0, CPU)
    assert float(_row_entropy(t0).std()) < 0.01
    p, t = task.make_inputs((256, 512), distribution, 0, CPU)
    assert max(float(_row_entropy(p).std()), float(_row_entropy(t).std())) > 0.3


def test_kl_mismatched_puts_target_mass_where_predictions_are_small() -> None:
    task = get_task("kl_div")
    p, t = (x.double() for x in task.make_inputs((256, 512), "mismatched", 0, CPU))
    forward = float((t * (t.log() - p.log())).sum() / 256)   # the reference: KL(targets || predictions)
    reverse = float((p * (p.log() - t.log())).sum() / 256)
    assert forward > 1.5 * reverse


def test_kl_peaked_mixes_peaked_and_flat_rows() -> None:
    task = get_task("kl_div")
    p, t = task.make_inputs((512, 512), "peaked", 0, CPU)
    p_peak, t_peak = p.amax(1) > 0.05, t.amax(1) > 0.05   # flat rows: max ~ 1.3 / 512
    assert bool((p_peak & ~t_peak).any()) and bool((t_peak & ~p_peak).any())
    assert bool((p_peak & t_peak).any()) and bool((~p_peak & ~t_peak).any())


def test_ce_dominant_rows_at_and_away_from_the_target() -> None:
    x, y = get_task("cross_entropy").make_inputs((512, 256), "dominant", 0, CPU)
    rowmax, argmax = x.max(1)
    dominant = rowmax > 5.0
    assert 0 < int(dominant.sum()) < 512 // 4
    assert bool((dominant & (argmax == y)).any()) and bool((dominant & (argmax != y)).any())


def test_ce_adversarial_targets_mix_argmin_argmax_random() -> None:
    x, y = get_task("cross_entropy").make_inputs((600, 256), "adversarial_targets", 0, CPU)
    at_min = float((x.argmin(1) == y).double().mean())
    at_max = float((x.argmax(1) == y).double().mean())
    assert 0.2 < at_min < 0.5 and 0.2 < at_max < 0.5 and at_min + at_max < 0.8


def test_ce_shifted_scaled_rows_differ_in_scale_and_shift() -> None:
    x, _ = get_task("cross_entropy").make_inputs((512, 256), "shifted_scaled", 0, CPU)
    width = x.amax(1) - x.amin(1)
    assert float(width.min()) < 0.2 and float(width.max()) > 15.0
    assert float(x.amin(1).min()) < -25.0 and float(x.amax(1).max()) > 25.0


@pytest.mark.parametrize("task", task_params())
def test_generation_uses_no_forbidden_operator(task: Task) -> None:
    # The sandboxed child regenerates inputs after replacing the forbidden operators by tripwires, so
    # generation itself must not touch them (for cross_entropy: no softmax, log_softmax, logsumexp).
    with torch.autograd.profiler.profile() as prof:
        for d in task.distributions:
            task.make_inputs(task.cpu_shape, d, 0, CPU)
    ops = {event.name for event in prof.function_events if event.name.startswith("aten::")}
    assert "aten::rand" in ops, "the profiler saw nothing: the check would be vacuous"
    assert not (ops & task.forbidden_aten_ops), sorted(ops & task.forbidden_aten_ops)


@pytest.mark.parametrize("task", task_params())
def test_unknown_distribution_raises(task: Task) -> None:
    with pytest.raises(ValueError, match="unknown"):
        task.make_inputs(task.cpu_shape, "gaussian", 0, CPU)
