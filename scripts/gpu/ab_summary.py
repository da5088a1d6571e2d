"""Summary of an alternating old/new judge run (scripts/gpu/ab_judges.sh): per judge and repeated file, the ranked
medians, the device hold and the child's start stage, each as median and range over every repeat of every round,
and the new judge's difference from the old in %. Then where each judge's device hold went: the stages of every first
judging (verdicts.json: both judges write it), per file, as medians over the rounds.

    python3 -m scripts.gpu.ab_summary OUT
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def collect(out: Path) -> dict[str, dict[str, dict[str, list[float]]]]:
    """judge -> file -> measure -> every value of every round (old rounds have no repeats.json: the md is parsed)."""
    found: dict[str, dict[str, dict[str, list[float]]]] = {}
    for run in sorted(p for p in out.iterdir() if p.is_dir() and "-" in p.name):
        judge = run.name.split("-", 1)[1]
        for name, measures in _repeats(run).items():
            for measure, values in measures.items():
                found.setdefault(judge, {}).setdefault(name, {}).setdefault(measure, []).extend(values)
    return found


def _repeats(run: Path) -> dict[str, dict[str, list[float]]]:
    if (run / "repeats.json").exists():
        return json.loads((run / "repeats.json").read_text())
    report = run / "gpu_acceptance.md"
    if not report.exists():
        return {}
    repeats: dict[str, dict[str, list[float]]] = {}
    for line in report.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 3 and cells[0].endswith(".py") and "CV" in cells[1]:
            medians = [float(x) for x in cells[1].split(" (")[0].split(", ")]
            held = [float(x) for x in cells[2].split(", ")]
            repeats[cells[0]] = {"median_ms": medians, "held_s": held}
    return repeats


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):.4g} ({min(values):.4g}-{max(values):.4g}, n={len(values)})"


HELD_STAGES = ("load", "correctness", "timing", "extra_shapes")
"""The stages inside a candidate's device hold (sandbox/execution/run.py); the rest of the hold is the child's end."""


def stage_rows(out: Path) -> list[str]:
    """Per file and judge: the hold and its stages in seconds, medians over the rounds' first judgings."""
    seen: dict[tuple[str, str], dict[str, list[float]]] = {}
    for run in sorted(p for p in out.iterdir() if p.is_dir() and "-" in p.name and (p / "verdicts.json").exists()):
        judge = run.name.split("-", 1)[1]
        for name, verdict in json.loads((run / "verdicts.json").read_text()).items():
            held = (verdict.get("details") or {}).get("cost", {}).get("device_held_s")
            if held is None:
                continue
            row = seen.setdefault((Path(name).name, judge), {})
            row.setdefault("held", []).append(held)
            for stage in HELD_STAGES:
                row.setdefault(stage, []).append(verdict.get("stages", {}).get(stage, 0.0))
    lines = ["| file | judge | held s | " + " | ".join(HELD_STAGES) + " | rest |", "|---" * (len(HELD_STAGES) + 4) + "|"]
    for (name, judge), row in sorted(seen.items()):
        medians = {k: statistics.median(v) for k, v in row.items()}
        rest = medians["held"] - sum(medians[s] for s in HELD_STAGES)
        lines.append(f"| {name} | {judge} | {medians['held']:.3f} | "
                     + " | ".join(f"{medians[s]:.3f}" for s in HELD_STAGES) + f" | {rest:.3f} |")
    return lines


def main() -> int:
    found = collect(Path(sys.argv[1]))
    print("| file | measure | old: median (range, n) | new: median (range, n) | new vs old |")
    print("|---|---|---|---|---|")
    for name in sorted(found.get("new", {})):
        for measure in ("median_ms", "held_s", "start_s"):
            old = found.get("old", {}).get(name, {}).get(measure)
            new = found["new"][name].get(measure)
            if not new:
                continue
            diff = (f"{100 * (statistics.median(new) / statistics.median(old) - 1):+.2f}%" if old else "-")
            print(f"| {name} | {measure} | {_cell(old) if old else '-'} | {_cell(new)} | {diff} |")
    print()
    print("\n".join(stage_rows(Path(sys.argv[1]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
