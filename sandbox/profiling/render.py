"""A profile as plain text sized for a prompt: what a model (or a person in a terminal) reads next turn.

Four kernels at most, the slowest first, each in three or four short lines; a value ncu did not give reads
"n/a", never 0. The whole stays under `PROMPT_CHARS` (a model's next turn carries the verdict's diagnosis
too, and a profile that crowds it out helps nobody); when it would not, fewer kernels are shown and the
text says how many were left out.
"""

from __future__ import annotations

from sandbox.profiling.report import KernelProfile, Profile

PROMPT_CHARS = 1500
MAX_KERNELS = 4
NAME_CHARS = 72
"""A demangled name keeps its template arguments and parameter list; its start is what names the kernel."""


def _time(ns: float | None) -> str:
    if ns is None:
        return "n/a"
    return f"{ns / 1e6:.3f} ms" if ns >= 1e6 else f"{ns / 1e3:.1f} us"


def _rate(bytes_per_s: float | None) -> str:
    return "n/a" if bytes_per_s is None else f"{bytes_per_s / 1e12:.2f} TB/s"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def _bytes(value: int | None) -> str:
    if value is None:
        return "n/a"
    return f"{value / 1024:.1f} KiB" if value >= 1024 else f"{value} B"


def _dims(value: tuple[int, int, int] | None) -> str:
    return "n/a" if value is None else "x".join(str(v) for v in value)


def _name(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 3] + "..."


def kernel_lines(index: int, kernel: KernelProfile) -> list[str]:
    launches = f" (x{kernel.launches})" if kernel.launches > 1 else ""
    stalls = ", ".join(f"{s.reason} {s.share_pct:.0f}%" for s in kernel.stalls) or "n/a"
    return [
        f"{index}. {_name(kernel.name)}{launches}",
        f"   time {_time(kernel.duration_ns)} | DRAM {_rate(kernel.dram_bytes_per_s)} "
        f"({_pct(kernel.dram_pct_of_peak)} of peak) | SM {_pct(kernel.sm_pct_of_peak)} | "
        f"occupancy {_pct(kernel.achieved_occupancy_pct)}",
        f"   regs/thread {kernel.registers_per_thread if kernel.registers_per_thread is not None else 'n/a'} | "
        f"smem/block {_bytes(kernel.shared_bytes_per_block)} | grid {_dims(kernel.grid)} | "
        f"block {_dims(kernel.block)}",
        f"   top stalls: {stalls}",
    ]


def _header(profile: Profile) -> str:
    where = "; ".join(p for p in (f"ncu {profile.ncu_version}" if profile.ncu_version else "ncu",
                                  profile.device_name) if p)
    limit = " (launch limit reached)" if profile.truncated else ""
    return (f"Nsight Compute profile ({where}): {profile.calls} call(s) after a warm-up, "
            f"{profile.launches} kernel launch(es){limit}, slowest first:")


def render_text(profile: Profile, *, max_kernels: int = MAX_KERNELS, limit: int = PROMPT_CHARS) -> str:
    """The profile for a prompt: under `limit` characters whatever the kernels' names."""
    if profile.status != "ok":
        word = "not available" if profile.status == "unavailable" else "failed"
        return f"Profile {word}: {profile.reason or 'no reason given'}"[:limit]
    if not profile.kernels:
        return f"{_header(profile)}\n(no kernel launched in the profiled calls)"[:limit]
    ordered = sorted(profile.kernels, key=lambda k: -(k.duration_ns or 0.0))
    for shown in range(min(max_kernels, len(ordered)), 0, -1):
        lines = [_header(profile)]
        for i, kernel in enumerate(ordered[:shown], start=1):
            lines += kernel_lines(i, kernel)
        if len(ordered) > shown:
            lines.append(f"(+{len(ordered) - shown} more kernel(s) not shown)")
        missing = sorted({u for k in ordered[:shown] for u in k.unavailable})
        if missing:
            lines.append(f"n/a = ncu gave no value for: {', '.join(missing)}")
        text = "\n".join(lines)
        if len(text) <= limit:
            return text
    return text[:limit - 3] + "..."
