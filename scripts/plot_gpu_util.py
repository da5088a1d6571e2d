"""The GPU-busy timeline of a run from nvidia-smi samples (issue 12): one lane per GPU, a bar where it computed.

`scripts/gpu_batch.py` samples `utilization.gpu` every 200 ms into gpu_batch_util.csv (time, gpu, utilization);
this turns consecutive samples above zero into busy spans and draws them with the service's timeline renderer
(`service/observability/timeline.py`, the one that draws device holds), so the two plots read alike. Where the
holds plot shows the device given to a candidate, this one shows when it actually ran kernels.

    python3 scripts/plot_gpu_util.py results/gpu_batch_util.csv -o results/gpu_batch_util.svg
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.observability.timeline import Hold, busy_fraction, render_svg  # noqa: E402


def busy_spans(samples: list[tuple[float, int, float]]) -> list[Hold]:
    """Each run of samples with utilization > 0 on one GPU becomes one span, from its first sample to the next
    sample after its last (a sample says the GPU was busy some time during the period just before it)."""
    spans: list[Hold] = []
    by_gpu: dict[int, list[tuple[float, float]]] = {}
    for t, gpu, util in sorted(samples):
        by_gpu.setdefault(gpu, []).append((t, util))
    for gpu, rows in by_gpu.items():
        start = None
        for i, (t, util) in enumerate(rows):
            if util > 0 and start is None:
                start = rows[i - 1][0] if i else t
            if util <= 0 and start is not None:
                spans.append(_span(gpu, start, t, len(spans)))
                start = None
        if start is not None:
            spans.append(_span(gpu, start, rows[-1][0], len(spans)))
    return spans


def _span(gpu: int, start: float, end: float, index: int) -> Hold:
    utc = dt.timezone.utc
    return Hold(lane=f"GPU {gpu} (nvidia-smi)", job_id=index, submission_id="", worker_id="",
                start=dt.datetime.fromtimestamp(start, utc), end=dt.datetime.fromtimestamp(end, utc), closed=True,
                result="busy")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("samples", type=Path, help="CSV: time (unix s), gpu, utilization (percent)")
    parser.add_argument("-o", "--out", type=Path, required=True, help="the SVG to write")
    parser.add_argument("--title", default="GPU busy (nvidia-smi utilization > 0)")
    args = parser.parse_args()
    with args.samples.open() as f:
        samples = [(float(r["time"]), int(r["gpu"]), float(r["utilization"])) for r in csv.DictReader(f)]
    if not samples:
        raise SystemExit(f"{args.samples}: no samples")
    utc = dt.timezone.utc
    start = dt.datetime.fromtimestamp(min(s[0] for s in samples), utc)
    end = dt.datetime.fromtimestamp(max(s[0] for s in samples), utc)
    spans = busy_spans(samples)
    args.out.write_text(render_svg(spans, title=args.title, start=start, end=end))
    for lane, fraction in busy_fraction(spans, start, end).items():
        print(f"{lane}: busy {fraction:.1%} of {(end - start).total_seconds():.0f} s, {len(spans)} spans")
    return 0


if __name__ == "__main__":
    sys.exit(main())
