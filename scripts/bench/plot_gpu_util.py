"""The GPU-busy timeline of a run from nvidia-smi samples (issue 12): one lane per GPU, a bar where it computed.

`scripts/bench/gpu_batch.py` samples `utilization.gpu` every 200 ms into gpu_batch_util.csv (time, gpu, utilization).
`service.observability.timeline.utilization_spans` turns consecutive samples above zero into busy spans, and the
timeline's renderer (the one that draws device holds) draws them, so the two plots read alike: the holds plot
shows when the device was given to a candidate, this one when it actually ran kernels.

    python3 scripts/bench/plot_gpu_util.py results/gpu_batch_util.csv -o results/gpu_batch_util.svg
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import sys
from pathlib import Path

from service.observability.timeline import busy_fraction, render_svg, utilization_spans


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
    spans = utilization_spans(samples)
    start, end = (dt.datetime.fromtimestamp(f(s[0] for s in samples), dt.timezone.utc).replace(tzinfo=None)
                  for f in (min, max))
    args.out.write_text(render_svg(spans, title=args.title, start=start, end=end))
    for lane, fraction in busy_fraction(spans, start, end).items():
        print(f"{lane}: busy {fraction:.1%} of {(end - start).total_seconds():.0f} s, {len(spans)} spans")
    return 0


if __name__ == "__main__":
    sys.exit(main())
