"""Summary of an alternating old/new judge run (scripts/gpu/ab_judges.sh): per judge and repeated file, the ranked
medians, the device hold and the child's start stage, each as median and range over every repeat of every round,
and the new judge's difference from the old in %. Then where each judge's device hold went: the stages of every first
judging (verdicts.json: both judges write it), per file, as medians over the rounds. Last, each repeat of the new
judge: its timing stage, gate wait, batches and their spread (from the timing details its repeats.json keeps).

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
    lines = ["| file | judge | held s | " + " | ".join(HELD_STAGES) + " | rest |",
             "|---" * (len(HELD_STAGES) + 4) + "|"]
    for (name, judge), row in sorted(seen.items()):
        medians = {k: statistics.median(v) for k, v in row.items()}
        rest = medians["held"] - sum(medians[s] for s in HELD_STAGES)
        lines.append(f"| {name} | {judge} | {medians['held']:.3f} | "
                     + " | ".join(f"{medians[s]:.3f}" for s in HELD_STAGES) + f" | {rest:.3f} |")
    return lines


def repeat_rows(out: Path) -> list[str]:
    """Per repeat of the new judge (its repeats.json keeps each one's timing details): the hold, the timing stage and
    its gate wait, the batches timed against the plan, a second timing, and how the batches' ranked times spread
    (how many were charged for work before their calls, how many the host clock claimed)."""
    lines = ["| run | file | held s | timing s | gate wait s | batches (calls of planned) | timed again | "
             "ranked min-max ms | charged batches | host-claimed batches | spare yielded s |", "|---" * 11 + "|"]
    for run in sorted(p for p in out.iterdir() if p.is_dir() and p.name.endswith("-new")):
        for name, measures in _repeats(run).items():
            records = measures.get("timing") or []
            for held, stages, record in zip(measures.get("held_s", []), measures.get("stages", []), records):
                if not isinstance(record, dict) or not record.get("ranked_ms"):
                    continue
                ranked, claims = record["ranked_ms"], record.get("batch_claims_ms", record["ranked_ms"])
                charged = sum(r > c for r, c in zip(ranked, claims))
                calls = record["timed_batches"] * record.get("batch_size", 1)
                again = (record.get("clocks") or {}).get("retimed", False)
                yielded = ((record.get("pre_started") or {}).get("yielded_s"))
                lines.append(f"| {run.name} | {name} | {held:.3f} | {stages.get('timing', 0.0):.3f} | "
                             f"{stages.get('device_gate_wait', 0.0):.3f} | {record['timed_batches']} ({calls} of "
                             f"{record.get('planned_calls')}) | {'yes' if again else 'no'} | "
                             f"{min(ranked):.4f}-{max(ranked):.4f} | {charged} | "
                             f"{len(record.get('hidden_work_batches') or [])} | "
                             f"{'-' if yielded is None else f'{yielded:.3f}'} |")
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
    rows = repeat_rows(Path(sys.argv[1]))
    if len(rows) > 2:
        print()
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
