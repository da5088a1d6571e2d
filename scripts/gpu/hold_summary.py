"""Where candidates' device holds went, from scripts/gpu/gpu_acceptance.py runs (their repeats.json and verdicts.json):
per repeat the ranked median, the hold, the device gate's wait, the timing stage and the spare's pre-calibration; per
first judging the span before each batch's calls beyond the judge's own work (`unattributed_ms`).

    python3 scripts/gpu/hold_summary.py OUT_A [OUT_B ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _rounded(values: list[float], digits: int = 2) -> list[float]:
    return [round(v, digits) for v in values]


def summary(out: Path) -> list[str]:
    """One line per repeated file and one per first judging of `out`."""
    lines = []
    for name, measures in json.loads((out / "repeats.json").read_text()).items():
        stages = measures.get("stages", [])
        lines.append(f"{out.name} {name} median {_rounded(measures['median_ms'], 4)} held {_rounded(measures['held_s'])}"
                     f" gate {_rounded([s.get('device_gate_wait', 0.0) for s in stages])}"
                     f" timing {_rounded([s.get('timing', 0.0) for s in stages])}"
                     f" precal {_rounded([s.get('pre_calibration', 0.0) for s in stages])}")
    for name, verdict in json.loads((out / "verdicts.json").read_text()).items():
        timing = (verdict.get("details") or {}).get("timing") or {}
        lines.append(f"  first {Path(name).name} {verdict['status']} unattributed "
                     f"{_rounded(timing.get('unattributed_ms', [])[:8], 4)} batches {timing.get('timed_batches')}")
    return lines


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print("\n".join(summary(Path(arg))))
