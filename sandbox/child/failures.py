"""How a failure in a child reaches the parent: an exception as the protocol's `ErrorInfo`, the candidate's frames
first (`error_info`), and `OutputRejected`, raised when forward() returned something that is not a plain, fresh
tensor on the right device.
"""

from __future__ import annotations

import traceback


from sandbox.child import no_build as _no_build
from sandbox import protocol as _protocol


TRACEBACK_LINES = 12
class OutputRejected(Exception):
    """forward() returned something that is not a plain, fresh tensor on the right device."""



def error_info(exc: BaseException) -> _protocol.ErrorInfo:
    """Exception type, message and the tail of the traceback, candidate frames first."""
    frames = traceback.extract_tb(exc.__traceback__)
    candidate_frames = [f for f in frames if f.filename.endswith("candidate.py")]
    where = candidate_frames[-1] if candidate_frames else (frames[-1] if frames else None)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return _protocol.ErrorInfo.unvalidated(
        type=type(exc).__name__,
        message=str(exc)[:20000],
        where=f"{where.filename}:{where.lineno} in {where.name}" if where else None,
        traceback="\n".join(text.splitlines()[-TRACEBACK_LINES * 3:]),
        kind=exc.kind if isinstance(exc, _no_build.NotBuilt) else None,
    )
