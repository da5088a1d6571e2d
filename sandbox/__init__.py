"""Judge one candidate kernel for one task on one device, in isolation, and return a typed `Verdict`.

Library use::

    from sandbox import judge
    verdict = judge("kl_div", completion_text, device="cuda:0")

Two-stage use (what the service does, so compilation overlaps GPU work)::

    prepared = prepare("kl_div", completion_text, target="cuda")   # CPU only: extract, check, compile
    if isinstance(prepared, Verdict): ...                           # rejected before running
    verdict = execute(prepared, device="cuda:0")                     # GPU: correctness + timing

Ahead of the first candidate (a service's worker does this in the background)::

    warm_headers(JudgeConfig().cache_root, "cpu", on_progress=print)   # the shared precompiled headers
    prewarm_compile("kl_div", "cpu", (64, 512), JudgeConfig())   # the reference's torch.compile, ahead

Command line: ``python -m sandbox judge --task kl_div --device cuda:0 candidate.py``.

Rooms by side of the trust boundary:
- child/: everything that runs in a process the candidate's code shares (untrusted once it is imported);
- shared/ and protocol.py: pure code and the wire format, imported by both sides;
- everything else (build/, execution/, profiling/, pipeline, verdict, isolation, ...): the trusted parent.
"""

from sandbox.build.warm import WARM_FLAG_SETS, WarmProgress
from sandbox.build.warm import warm as warm_headers
from sandbox.config import JudgeConfig
from sandbox.execution.baseline import prewarm_compile
from sandbox.pipeline import PreparedCandidate, execute, judge, prepare
from sandbox.verdict import Environment, Performance, Status, TimingStats, TrialResult, Verdict

__all__ = [
    "Environment",
    "JudgeConfig",
    "Performance",
    "PreparedCandidate",
    "Status",
    "TimingStats",
    "TrialResult",
    "Verdict",
    "WARM_FLAG_SETS",
    "WarmProgress",
    "execute",
    "judge",
    "prepare",
    "prewarm_compile",
    "warm_headers",
]
