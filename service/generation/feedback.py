"""What the model is told after a non-correct verdict: the next user message of its conversation.

Order matters because models act on what comes first and long logs get cut: the compiler's error lines
first, then the failing trial (which input distribution and shape, max abs/rel error, expected vs got),
then the broken rule and the call that broke it, then the exception. Bounded so a 10,000-line build log
never crowds out the conversation.
"""

from __future__ import annotations

from typing import Any

MAX_LOG_LINES = 40
MAX_CHARS = 6000

_ASK = ("Fix the problem and reply with the complete corrected code: one ```python block defining "
        "`class ModelNew(nn.Module)`, with the same inputs and outputs as the reference `Model`.")


def feedback_message(verdict: dict[str, Any] | None, *, diagnosis: str | None = None,
                     profile: str | None = None) -> str:
    """The refinement prompt for one judged sample (the verdict as the API returns it). `profile`: its Nsight
    Compute profile as text (sandbox.profiling.render), placed after the diagnosis, which matters more."""
    verdict = verdict or {}
    status = verdict.get("status", "unknown")
    parts = [f"The judge rejected your kernel: {status}."]
    text = verdict.get("diagnosis") or diagnosis
    if text:
        parts.append(f"Diagnosis: {text.strip()}")
    details = verdict.get("details") or {}
    if status == "compile_error":
        errors = details.get("errors") or []
        log = "\n".join(errors[:MAX_LOG_LINES]) if errors else _error_lines(verdict.get("compile_log") or "")
        if log.strip():
            parts.append("Compiler errors (first lines):\n```\n" + log + "\n```")
    failing = [t for t in verdict.get("trials") or [] if not t.get("passed", True)]
    if failing:
        parts.append(_trial(failing[0]) + (f" ({len(failing)} trials failed in all.)" if len(failing) > 1 else ""))
    rule = {k: details[k] for k in ("rule", "calls", "call") if details.get(k)}
    if rule:
        parts.append("Rule broken: " + "; ".join(f"{k}: {v}" for k, v in rule.items()))
    exception = details.get("exception") or details.get("traceback")
    if exception and status in ("runtime_error", "timeout", "incorrect"):
        parts.append("Exception:\n```\n" + _tail(str(exception)) + "\n```")
    if profile:
        parts.append(profile.strip())
    parts.append(_ASK)
    message = "\n\n".join(parts)
    return message if len(message) <= MAX_CHARS else message[:MAX_CHARS - len(_ASK) - 8] + "\n...\n\n" + _ASK


def speedup_message(verdict: dict[str, Any], profile: str | None) -> str:
    """The next prompt for a correct kernel when profiles were asked for (`generate --profile`): its time and
    speedups, its profile, and the request to make it faster while keeping it correct."""
    perf = verdict.get("performance") or {}
    candidate = perf.get("candidate") or {}
    parts = ["The judge accepted your kernel: correct."]
    figures = []
    if candidate.get("median_ms") is not None:
        figures.append(f"median {candidate['median_ms']:.4g} ms")
    for name, value in sorted((perf.get("speedups") or {}).items()):
        if value is not None:
            figures.append(f"{value:.3g}x {name}")
    if perf.get("speed_of_light_fraction") is not None:
        figures.append(f"{perf['speed_of_light_fraction']:.1%} of speed-of-light")
    if figures:
        parts.append("Timing: " + ", ".join(figures) + ".")
    if profile:
        parts.append(profile.strip())
    parts.append(_FASTER)
    return "\n\n".join(parts)[:MAX_CHARS]


_FASTER = ("Make it faster while keeping it correct, and reply with the complete code: one ```python block "
           "defining `class ModelNew(nn.Module)`, with the same inputs and outputs as the reference `Model`.")


def _error_lines(log: str) -> str:
    """Lines that name an error first, then the rest of the log's head, bounded."""
    lines = log.splitlines()
    errors = [line for line in lines if "error" in line.lower()]
    rest = [line for line in lines if line not in errors]
    return "\n".join((errors + rest)[:MAX_LOG_LINES])


def _trial(trial: dict[str, Any]) -> str:
    where = f"trial {trial.get('trial')} ({trial.get('distribution')} inputs, shape {trial.get('shape')})"
    numbers = []
    for name in ("max_abs_error", "max_rel_error", "expected", "got", "worst_index"):
        if trial.get(name) is not None:
            numbers.append(f"{name} {trial[name]}")
    message = f": {trial['message']}" if trial.get("message") else ""
    return f"Failing {where}{message}" + (" - " + ", ".join(numbers) if numbers else "") + "."


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
