"""How often the parent's reading of its own making of a call's inputs spikes (plausibility.MAKING_SPIKE_FACTOR).

Makes every distribution's inputs of both tasks at their CPU size `--rounds` times through `made_on_device` (one torch
thread, this thread's CPU time: what the parent reads beside each timed batch) and prints, per task, the range of the
distributions' medians, how many readings were over `--factor` times their distribution's median, and the worst ratio.
Run it idle and beside a load (the test suite, busy loops): the figures in MAKING_SPIKE_FACTOR's docstring.

    python -m scripts.experiments.measure_making_spikes --rounds 60
"""

from __future__ import annotations

import argparse
import statistics

import torch

from reference import get_task
from sandbox.execution.making import made_on_device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="readings per distribution")
    parser.add_argument("--factor", type=float, default=3.0, help="a spike: a reading over this times its median")
    args = parser.parse_args()
    device = torch.device("cpu")
    for task_id in ("kl_div", "cross_entropy"):
        task = get_task(task_id)
        medians, spikes, readings, worst = [], 0, 0, 0.0
        for distribution in task.distributions:
            made = [made_on_device(lambda d=distribution, r=r: task.make_inputs(task.cpu_shape, d, 7919 * r + 1,
                                                                                device), device)[1]
                    for r in range(args.rounds)]
            median = statistics.median(made)
            medians.append(median)
            spikes += sum(ms > args.factor * median for ms in made)
            readings += len(made)
            worst = max(worst, max(made) / median)
        print(f"{task_id}: medians {min(medians):.3f}-{max(medians):.3f} ms; over {args.factor:g}x the median: "
              f"{spikes} of {readings}; the worst {worst:.1f}x")


if __name__ == "__main__":
    main()
