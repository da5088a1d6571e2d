"""What building and serialising the child's `go` reply costs inside the parent's wall window, per way of building it.

The parent's clock runs from sending `go` to reading its reply (sandbox/execution/phases.py, `timed_batch`), so the
child's work to build and serialise that reply is inside the window the timing bound reads. Three ways, each timed
from the batch's results to the bytes handed to `os.write` (the write itself is the same for all):

- `dict`: the dict the child built before it used the protocol models;
- `model`: a validated `GoReply` (strict pydantic validation of every field), then `wire_header`;
- `unvalidated`: `GoReply.success` (`model_construct`, what the child does), then `wire_header`.

Each build is timed alone with `perf_counter_ns`; the figures are the median and the 10th-90th percentiles over
`--builds` builds, for a batch of one call and of MAX_BATCH calls (the reply carries one time per call).

    python -m scripts.bench.reply_cost --builds 10000 [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import struct
import time
from collections.abc import Callable
from typing import Any

from sandbox import protocol as msg

_LEN = struct.Struct("<Q")


def _frame(header: dict[str, Any], payloads: list[bytes]) -> bytes:
    """The framing of `msg.send_header` without the write: the same JSON and length prefix."""
    body = json.dumps({**header, "payload_sizes": [len(p) for p in payloads]}).encode()
    return _LEN.pack(len(body)) + body


def fields(calls: int) -> dict[str, Any]:
    """A realistic batch's results: times with full float precision, events recorded."""
    times = [0.123456789 + i * 1e-4 for i in range(calls)]
    return {"dtype": "float32", "shape": [], "time_ms": sum(times) / calls, "times_ms": times,
            "host_ms": sum(times) * 1.01, "event_ms": sum(times) / calls, "hidden_work": False}


def as_dict(values: dict[str, Any], payloads: list[bytes]) -> bytes:
    meta = {"dtype": values["dtype"], "shape": values["shape"]}
    meta.update(time_ms=values["time_ms"], times_ms=values["times_ms"], host_ms=values["host_ms"],
                event_ms=values["event_ms"], hidden_work=values["hidden_work"])
    return _frame({"op": "go", "ok": True, **meta}, payloads)


def as_model(values: dict[str, Any], payloads: list[bytes]) -> bytes:
    return _frame(msg.wire_header(msg.GoReply(op="go", ok=True, **values)), payloads)


def as_unvalidated(values: dict[str, Any], payloads: list[bytes]) -> bytes:
    return _frame(msg.wire_header(msg.GoReply.success(**values)), payloads)


WAYS: dict[str, Callable[[dict[str, Any], list[bytes]], bytes]] = {
    "dict": as_dict, "model": as_model, "unvalidated": as_unvalidated}


def measure(way: Callable[[dict[str, Any], list[bytes]], bytes], calls: int, builds: int) -> dict[str, float]:
    values = fields(calls)
    payloads = [b"\x00\x00\x80?"] * calls
    for _ in range(min(1000, builds)):  # warm the interpreter's caches and pydantic's serializers
        way(values, payloads)
    samples = []
    for _ in range(builds):
        started = time.perf_counter_ns()
        way(values, payloads)
        samples.append(time.perf_counter_ns() - started)
    deciles = statistics.quantiles(samples, n=10)
    return {"median_us": statistics.median(samples) / 1e3, "p10_us": deciles[0] / 1e3, "p90_us": deciles[-1] / 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builds", type=int, default=10_000)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    for calls in (1, msg.MAX_BATCH):  # every way must give the same bytes before any is timed
        values = fields(calls)
        wire = {as_dict(values, [b""] * calls)} | {way(values, [b""] * calls) for way in WAYS.values()}
        assert len(wire) == 1, "the ways of building the reply disagree on the bytes"
    rows = [{"calls": calls, "way": name, **measure(way, calls, args.builds)}
            for calls in (1, msg.MAX_BATCH) for name, way in WAYS.items()]
    print(f"go reply, build + serialise, {args.builds} builds each ({platform.python_version()}, "
          f"{platform.processor() or platform.machine()})")
    print(f"{'calls':>5}  {'way':<12} {'median us':>10} {'p10 us':>8} {'p90 us':>8}")
    for row in rows:
        print(f"{row['calls']:>5}  {row['way']:<12} {row['median_us']:>10.2f} {row['p10_us']:>8.2f} "
              f"{row['p90_us']:>8.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"builds": args.builds, "python": platform.python_version(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
