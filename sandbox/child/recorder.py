"""The kernel trace recorder inside the execution child (issue 28): torch's profiler (kineto, CUPTI underneath) over
the candidate's whole life in the child, recording device activity alone, with the canaries the judge's rules read.

Untrusted process, same THREAT MODEL as sandbox/child/harness.py. The recorder is the judge's, started before the
candidate is imported, but it runs in the process it observes: a candidate's native code can stop it, unsubscribe
CUPTI, or write the exported file itself. The judge never trusts the record, it only checks that it was not cut:

- canaries: at the start and end of every timed call (outside its timing events), a device-to-device copy of a
  number of bytes drawn from a key the parent made for this candidate alone (`sandbox.shared.trace.canary_bytes`).
  The parent knows how many calls ran, so it knows the exact sequence the trace must hold; one missing or out of
  order, or a trace absent or truncated, is tampering (sandbox/execution/tracing.py). `copy_` of contiguous bytes
  is one cudaMemcpyAsync, which kineto records with its byte count (a `zero_` is a fill kernel, which carries none).
  The canaries are also the only marks: each call's window on the device runs from its first canary to its second,
  and the gaps between calls must hold the harness's flush alone;
- device activity only (`ProfilerActivity.CUDA`): no operator callbacks and no annotations. Recording the host side
  too cost a short call ~0.25 ms of host time on an H100, rising with the child's age, which starved the device
  inside the timing events (+94% on 0.19 ms calls); device activity alone costs the host ~0.05 ms a call
  (docs/results/trace-overhead-h100-2026-11-26.md);
- a probe before the candidate exists (`probe`): one canary recorded and read back through the same parser the
  parent uses. A host where kineto gives no device activity (no CUPTI, another torch) says "unavailable" with the
  reason, and the parent applies no rule: the trace never turns a host's limits into a candidate's verdict.

torch's profiler allows one session at a time, and a correctness trial runs its own (`Child._profiled`: the
evidence of custom kernels), so the life trace is a sequence of segments: paused around each trial, each segment
exported to its own file in the working directory (the child's /build, which the parent reads with no link
followed and a size cap). The timing phase, which the rules judge, has no trial in it: one segment holds it.
On the CPU there is no device activity: the recorder still runs when asked, recording the host's operators (its
segments, pauses and files are what the CPU tests drive), without canaries, and the parent reports the trace as
unavailable.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import torch

from sandbox.shared import trace as _trace

_profile = torch.profiler.profile
_Activity = torch.profiler.ProfilerActivity
SEGMENT = "judge-trace-{}.json"
"""Segment files in the child's working directory, numbered from 0 (the parent accepts these names alone)."""


class Recorder:
    """The life trace of one candidate: `start` before the import, `pause`/`resume` around a trial's own profile,
    `finish` after the timing; between them the timing's marks (`canary`, two per timed call)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.activities = [_Activity.CUDA] if self.cuda else [_Activity.CPU]
        size = _trace.MAX_CANARY_BYTES + 1
        self._source = torch.zeros(size, dtype=torch.uint8, device=device)
        self._target = torch.zeros(size, dtype=torch.uint8, device=device)
        self._key = b""
        self._canaries = 0
        self._prof: Any = None
        self._dir = os.getcwd()
        """The child's working directory, read before the candidate exists (a candidate's chdir moves nothing)."""
        self.files: list[str] = []
        self.error = ""
        """Why the recorder stopped early (an exception of torch's profiler), reported by `finish`."""

    # --- before the candidate ---------------------------------------------------------------------

    def probe(self) -> str:
        """"available", or "unavailable: why": one canary recorded and parsed as the parent will parse it."""
        if not self.cuda:
            return "unavailable: no device activity on the CPU"
        try:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "probe.json")
                n = 4099
                prof = _profile(activities=self.activities)
                prof.start()
                self._target[:n].copy_(self._source[:n])
                torch.cuda.synchronize(self.device)
                prof.stop()
                prof.export_chrome_trace(path)
                with open(path, encoding="utf-8") as fh:
                    records, _ = _trace.parse_chrome_trace(fh.read())
        except Exception as exc:  # noqa: BLE001 - a profiler that fails here is a host's limit, reported as such
            return f"unavailable: the profiler failed before the candidate existed ({type(exc).__name__}: {exc})"[:300]
        if not any(r.kind == "memcpy" and r.bytes == n for r in records):
            return "unavailable: the profiler recorded no device copy (no CUPTI activity on this host)"
        return "available"

    def start(self, key: bytes) -> None:
        """The first segment, before the candidate is imported; `key` draws the canaries' sizes."""
        self._key = key
        self.resume()

    # --- segments ---------------------------------------------------------------------------------------

    def resume(self) -> None:
        if self._prof is not None or self.error:
            return
        try:
            self._prof = _profile(activities=self.activities)
            self._prof.start()
        except Exception as exc:  # noqa: BLE001 - reported; the parent decides what a cut trace means
            self._prof, self.error = None, f"{type(exc).__name__}: {exc}"[:300]

    def pause(self) -> None:
        """End the current segment and export it (before a trial's own profile, and at `finish`)."""
        prof, self._prof = self._prof, None
        if prof is None:
            return
        name = SEGMENT.format(len(self.files))
        try:
            if self.cuda:
                torch.cuda.synchronize(self.device)  # the segment's device work complete before CUPTI is flushed
            prof.stop()
            prof.export_chrome_trace(os.path.join(self._dir, name))
        except Exception as exc:  # noqa: BLE001 - reported; the parent decides what a cut trace means
            self.error = f"{type(exc).__name__}: {exc}"[:300]
            return
        self.files.append(name)

    def finish(self) -> dict[str, Any]:
        """Stop recording; what the parent needs to find and check the record."""
        self.pause()
        return {"files": list(self.files), "calls": self._canaries // 2, "canaries": self._canaries,
                "recorder_error": self.error}

    # --- marks, called by the timing (sandbox/child/timing.py `Marks`) -------------------------------

    def exercise(self) -> None:
        """What a canary runs, once, uncounted: the harness probe records its operators, so a kernel a candidate
        registers for one of them is seen (sandbox/child/operators.py `harness_operators`)."""
        self._target[:1].copy_(self._source[:1])

    def canary(self) -> None:
        """The next canary: a copy of the key's next size."""
        n = _trace.canary_bytes(self._key, self._canaries)
        self._canaries += 1
        self._target[:n].copy_(self._source[:n])
