"""The parent/child wire format: length-prefixed JSON headers followed by raw byte payloads.

Nothing here unpickles or evaluates: the parent reads at most `limit` bytes, parses JSON, and builds
tensors from raw bytes with a dtype and shape it validates itself. Everything the child sends is
untrusted: a candidate running in the child can write to the same pipe.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

_LEN = struct.Struct("<Q")
MAX_HEADER = 1 << 20


class ChannelClosed(EOFError):
    """The other side closed the pipe (the child exited or was killed)."""


class ChannelTimeout(TimeoutError):
    """No complete message before the deadline."""


class ProtocolError(ValueError):
    """The peer sent something that is not a valid message."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send(fd: int, header: dict[str, Any], payloads: list[bytes] | None = None) -> None:
    payloads = payloads or []
    header = {**header, "payload_sizes": [len(p) for p in payloads]}
    body = json.dumps(header).encode()
    _write_all(fd, _LEN.pack(len(body)) + body)
    for payload in payloads:
        _write_all(fd, payload)


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining:
        if deadline is not None:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                raise ChannelTimeout(f"waited past the deadline with {remaining} of {n} bytes unread")
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                continue
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise ChannelClosed("the channel closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, *, deadline: float | None = None, limit: int = 64 << 20) -> tuple[dict[str, Any], list[bytes]]:
    """Read one message; `limit` bounds header + payloads so a hostile peer cannot exhaust our memory."""
    (size,) = _LEN.unpack(_read_exact(fd, _LEN.size, deadline))
    if size > MAX_HEADER:
        raise ProtocolError(f"header of {size} bytes exceeds {MAX_HEADER}")
    try:
        header = json.loads(_read_exact(fd, size, deadline))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    sizes = header.get("payload_sizes", [])
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes):
        raise ProtocolError("payload_sizes must be a list of non-negative integers")
    if sum(sizes) > limit:
        raise ProtocolError(f"payloads of {sum(sizes)} bytes exceed the limit of {limit}")
    return header, [_read_exact(fd, s, deadline) for s in sizes]
