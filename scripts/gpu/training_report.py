"""The training variants' table (step, forward alone, backward share, peak memory, speed-of-light, baselines)
from the verdicts a judge run wrote, for docs/benchmarks.md.

On the GPU machine (after `source scripts/gpu/device_env.sh`; Liger-Kernel installed from the carried wheels
adds its row, otherwise the table says why it is missing):

    python scripts/gpu/gpu_acceptance.py --device cuda:0 --repeat 0 --out results/training \\
        --only kl_div_train_function.py kl_div_train_fused.py cross_entropy_train_function.py \\
               cross_entropy_train_fused.py t1_zero_gradient.py t1_reference_backward.py t2_subsample_rows.py \\
               t3_cached_gradient.py
    python scripts/gpu/training_report.py results/training/verdicts.json > results/training/training.md

Any verdicts.json works (CPU ones too); verdicts of forward tasks are left out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _ms(stats: dict | None) -> str:
    return f"{stats['median_ms']:.4f}" if stats else "-"


def _mib(value: int | None) -> str:
    return f"{value / 2**20:.0f}" if value is not None else "-"


def row(name: str, v: dict) -> str:
    perf, train = v.get("performance"), v.get("details", {}).get("training", {})
    head = f"| {Path(name).name} | {v['task']} | {v['status']} |"
    if perf is None or not train:
        return head + " - |" * 8 + f" {v['diagnosis'][:140].replace('|', '/')} |"
    base = perf["baselines"]
    skipped = train.get("baselines_skipped", {}).get("liger", "-")
    cells = [
        _ms(perf["candidate"]), _ms(train.get("forward")), f"{100 * train.get('backward_share', 0):.0f}%",
        f"{_mib(perf.get('peak_memory_bytes'))} / {_mib(perf.get('reference_peak_memory_bytes'))}",
        f"{100 * (perf.get('speed_of_light_fraction') or 0):.1f}% / "
        f"{100 * (train.get('forward_speed_of_light_fraction') or 0):.1f}%",
        f"{_ms(base.get('eager'))} / {_ms(base.get('compile'))}",
        _ms(base["liger"]) if "liger" in base else f"({skipped})",
        " / ".join(f"{k} {s:.2f}x" for k, s in perf["speedups"].items()),
        f"{train.get('gradient_checks', '-')} checks, max rel {train.get('gradient_max_rel_error') or 0:.1e}",
    ]
    return head + " " + " | ".join(cells) + " |"


def rows(verdicts: dict[str, dict]) -> list[str]:
    return [row(name, v) for name, v in verdicts.items() if v["task"].endswith("_train")]


HEAD = ("| candidate | task | verdict | step ms | forward ms | backward share | peak MiB (cand / eager ref) | "
        "% SoL step / forward | eager / compile step ms | Liger step ms | speedups (eager / compile / liger) | "
        "gradient |\n|" + "---|" * 12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("verdicts", type=Path)
    args = parser.parse_args()
    print(HEAD)
    print("\n".join(rows(json.loads(args.verdicts.read_text()))))


if __name__ == "__main__":
    main()
