"""The parent/child wire format refuses what a hostile child could send."""

import os
import struct

import pytest

from sandbox import protocol


def pipe():
    r, w = os.pipe()
    return r, w


def test_round_trip_with_payloads():
    r, w = pipe()
    protocol.send_header(w, {"op": "trial", "ok": True}, [b"\x00\x01", b"abc"])
    header, payloads = protocol.receive(r, deadline=None)
    assert header["op"] == "trial" and header["payload_sizes"] == [2, 3]
    assert payloads == [b"\x00\x01", b"abc"]


def test_oversized_header_is_refused():
    r, w = pipe()
    os.write(w, struct.pack("<Q", protocol.MAX_HEADER + 1))
    with pytest.raises(protocol.ProtocolError, match="exceeds"):
        protocol.receive(r)


def test_payload_over_limit_is_refused_before_reading_it():
    r, w = pipe()
    protocol.send_header(w, {"op": "x"}, [b"x" * 100])
    with pytest.raises(protocol.ProtocolError, match="exceed the limit"):
        protocol.receive(r, limit=10)


def test_non_json_header_is_refused():
    r, w = pipe()
    os.write(w, struct.pack("<Q", 5) + b"hello")
    with pytest.raises(protocol.ProtocolError, match="not JSON"):
        protocol.receive(r)


def test_closed_channel_and_deadline():
    r, w = pipe()
    os.close(w)
    with pytest.raises(protocol.ChannelClosed):
        protocol.receive(r)
    r2, w2 = pipe()
    os.write(w2, struct.pack("<Q", 10) + b"{")
    with pytest.raises(protocol.ChannelTimeout):
        import time
        protocol.receive(r2, deadline=time.monotonic() + 0.2)
