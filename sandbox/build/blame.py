"""Whose a failed build is: the host's only where the parent measured the cause itself.

A build child's error message is the candidate's text. The compiler quotes the candidate's `#error` and
`static_assert` lines, and the candidate's own Python runs in the build child and can raise any message it likes.
Read alone, "No space left on device", "Killed signal terminated program cc1plus" or a precompiled header's path in
that text made a compile error a system_error: retried at the host's cost, then stored as the judge's failure, which
a trainer drops instead of scoring (service/integrations/scoring.py). So the text only says which cause to look for,
and the parent then looks for it where the candidate cannot write:

- killed or out of memory: the host's OOM killer killed something while the build ran (/proc/vmstat `oom_kill`)
  and the build's memory stayed under its own limit (its cgroup never reached it). A build that reached its own
  limit was killed for what it compiled (or allocated at import), the same way every time: the candidate's.
  Without a kill the host counted, the compiler's failure is the candidate's text.
- a full disk: the filesystem of the build root has less than DISK_FULL_FREE_BYTES left for an unprivileged writer
  when the reply is read (the build's partial objects are still there).
- the judge's accelerators in the way: the parent builds once more with none offered (sandbox/pipeline.py), and that
  build's outcome is the candidate's whatever its text says (`accelerators_named`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from sandbox.shared.accel_layout import ACCELERATOR_WORDS

KILLED = re.compile(r"Killed signal terminated program|internal compiler error: Killed|virtual memory exhausted"
                    r"|out of memory allocating|cannot allocate memory", re.I)
"""What a compiler that was killed, or ran out of memory, prints."""
NO_SPACE = re.compile(r"No space left on device|Disk quota exceeded", re.I)
"""What a write to a full disk fails with."""
DISK_FULL_FREE_BYTES = 64 << 20
"""A build root with less than this free is full: a write that failed for space leaves less than one object file
behind it (a main.o is 5-40 MB), while a disk with room for the judge's builds has gigabytes."""


def host_oom_kills() -> int | None:
    """The host's OOM kills since boot (/proc/vmstat `oom_kill`), or None where it cannot be read."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still write on the filesystem of `path`, or None where it cannot be read."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


@dataclass(frozen=True, kw_only=True)
class HostEvidence:
    """What the parent measured itself around one build: nothing here passed through the candidate's process."""

    host_oom_kills: int | None
    """The host's OOM kills while the build ran (None where /proc/vmstat could not be read)."""
    limit_reached: bool
    """The build's memory reached its own limit (its cgroup's count; False without a cgroup, where RLIMIT_AS fails an
    allocation instead of killing)."""
    build_root_free: int | None
    """Bytes free on the build root's filesystem when the reply was read (None where it could not be read)."""

    @property
    def host_oom(self) -> bool:
        """The host ran out of memory during the build, not the build out of its own share."""
        return bool(self.host_oom_kills) and not self.limit_reached

    @property
    def disk_full(self) -> bool:
        return self.build_root_free is not None and self.build_root_free < DISK_FULL_FREE_BYTES


def infrastructure_failure(error_message: str, evidence: HostEvidence) -> str | None:
    """Why a failed build is the host's rather than the candidate's, or None: a cause the message names only where
    `evidence` confirms it (module doc). The judge's accelerators are not judged here (`accelerators_named`)."""
    killed = KILLED.search(error_message)
    if killed and evidence.host_oom:
        return f"the compiler did not finish ({killed.group(0)}; the kernel's OOM killer ran during the build)"
    no_space = NO_SPACE.search(error_message)
    if no_space and evidence.disk_full:
        return (f"the compiler did not finish ({no_space.group(0)}; the build disk had "
                f"{evidence.build_root_free // (1 << 20)} MiB free)")
    return None


def accelerators_named(error_message: str) -> str | None:
    """The words in a failed build's message that only a compile the judge's accelerators took part in prints, or
    None. Where the child was offered accelerators, the parent builds once more without them."""
    found = ACCELERATOR_WORDS.search(error_message)
    return found.group(0) if found else None
