"""The child's replies on the wire: built from the protocol models, byte for byte what it wrote as dicts, and what the
parent parses.

Each case pairs a reply built the child's way (`Reply.success` / `Message.unvalidated`, the integrity fields added with
`model_copy` as `Child.reply` does) with the dict the child built for the same reply before it used the models. Both
go through the real framing into a pipe; the bytes must be equal, and the parent's `receive` + `parse_reply` must
return the reply type it waits for, with the same values.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from sandbox import protocol as msg

CHECKS: dict[str, Any] = {"python_threads": 0, "native_threads": 1, "processes": ["sleep 10"],
                          "tampered": ["torch:sum"], "tripwire_hits": ["aten::kl_div"]}
"""What `Child.reply` adds to every reply but `go`'s, in the order it added them."""
PRINTS = ["a1b2", "c3d4"]
ERROR = {"type": "ValueError", "message": "boom", "where": "candidate.py:3 in forward", "traceback": "Traceback...",
         "kind": None}


def checked(reply: msg.Reply) -> msg.Reply:
    return reply.model_copy(update=CHECKS)


# (name, the reply as the child builds it, the dict it built before, the model the parent waits for, payloads)
CASES: list[tuple[str, msg.Reply | msg.BuildReply, dict[str, Any], type, list[bytes]]] = [
    ("started", msg.Started.success(), {"op": "started", "ok": True}, msg.Started, []),
    ("ready", msg.Ready.success(setup_s={"tripwires": 0.01, "context": 0.5}),
     {"op": "ready", "ok": True, "setup_s": {"tripwires": 0.01, "context": 0.5}}, msg.Ready, []),
    ("ready with the trace probe", msg.Ready.success(setup_s={"context": 0.5}, trace="available"),
     {"op": "ready", "ok": True, "setup_s": {"context": 0.5}, "trace": "available"}, msg.Ready, []),
    ("trace_end", msg.TraceEndReply.success(files=["judge-trace-0.json"], calls=64, canaries=128,
                                            recorder_error=""),
     {"op": "trace_end", "ok": True, "files": ["judge-trace-0.json"], "calls": 64, "canaries": 128,
      "recorder_error": ""}, msg.TraceEndReply, []),
    ("calibrate", checked(msg.CalibrateReply.success(host_overhead_ms=0.0123, flush_ms=0.085, lead_ms=0.5,
                                                     make_host_ms=0.51)),
     {"op": "calibrate", "ok": True, "host_overhead_ms": 0.0123, "flush_ms": 0.085, "lead_ms": 0.5,
      "make_host_ms": 0.51, **CHECKS}, msg.CalibrateReply, []),
    ("load", checked(msg.LoadReply.success(extensions=["kl_ext"])),
     {"op": "load", "ok": True, "extensions": ["kl_ext"], **CHECKS}, msg.LoadReply, []),
    ("trial", checked(msg.TrialReply.success(dtype="float32", shape=[], before=PRINTS, after=PRINTS,
                                             custom_calls=["kl_ext.forward"], custom_ops=[], custom_kernels=["k"])),
     {"op": "trial", "ok": True, "dtype": "float32", "shape": [], "before": PRINTS, "after": PRINTS,
      "custom_calls": ["kl_ext.forward"], "custom_ops": [], "custom_kernels": ["k"], **CHECKS},
     msg.TrialReply, [b"\x00\x00\x80?"]),
    ("training trial", checked(msg.TrainTrialReply.success(
        dtype="float32", shape=[], before=PRINTS, after=PRINTS, custom_calls=[], custom_ops=["my::op"],
        custom_kernels=[], backward_custom_calls=[], backward_custom_ops=["my::op"], backward_custom_kernels=[],
        custom_function=True)),
     {"op": "trial", "ok": True, "dtype": "float32", "shape": [], "before": PRINTS, "after": PRINTS,
      "custom_calls": [], "custom_ops": ["my::op"], "custom_kernels": [], "backward_custom_calls": [],
      "backward_custom_ops": ["my::op"], "backward_custom_kernels": [], "custom_function": True, **CHECKS},
     msg.TrainTrialReply, [b"\x00\x00\x80?"]),
    ("estimate", checked(msg.EstimateReply.success(estimate_ms=1.25)),
     {"op": "estimate", "ok": True, "estimate_ms": 1.25, **CHECKS}, msg.EstimateReply, []),
    ("arm", checked(msg.ArmReply.success()), {"op": "arm", "ok": True, **CHECKS}, msg.ArmReply, []),
    # `go` is lean: no integrity fields, `tampered` only when the harness found something.
    ("go", msg.GoReply.success(dtype="float32", shape=[], time_ms=0.25, times_ms=[0.2, 0.3], host_ms=0.6,
                               event_ms=0.5, hidden_work=False, made_ms=10.2, gaps_ms=[0.09]),
     {"op": "go", "ok": True, "dtype": "float32", "shape": [], "time_ms": 0.25, "times_ms": [0.2, 0.3],
      "host_ms": 0.6, "event_ms": 0.5, "hidden_work": False, "made_ms": 10.2, "gaps_ms": [0.09]}, msg.GoReply,
     [b"\x00\x00\x80?", b"\x00\x00\x00@"]),
    ("go, with findings", msg.GoReply.success(dtype="float32", shape=[], time_ms=0.25, times_ms=[0.25], host_ms=0.3,
                                              event_ms=None, hidden_work=True).model_copy(
                                                  update={"tampered": ["the timing clock._overhead"]}),
     {"op": "go", "ok": True, "dtype": "float32", "shape": [], "time_ms": 0.25, "times_ms": [0.25], "host_ms": 0.3,
      "event_ms": None, "hidden_work": True, "tampered": ["the timing clock._overhead"]},
     msg.GoReply, [b"\x00\x00\x80?"]),
    ("inspect", checked(msg.InspectReply.success(after=PRINTS, after_all=[PRINTS], peak_memory_bytes=None)),
     {"op": "inspect", "ok": True, "after": PRINTS, "after_all": [PRINTS], "peak_memory_bytes": None, **CHECKS},
     msg.InspectReply, []),
    ("grad_check", checked(msg.GradCheckReply.success(dtype="float32", shape=[4, 8])),
     {"op": "grad_check", "ok": True, "dtype": "float32", "shape": [4, 8], **CHECKS}, msg.GradCheckReply,
     [b"\x00" * 32, b"\x00" * 64]),
    ("failed step", checked(msg.Reply.unvalidated(op="trial", ok=False, error=msg.ErrorInfo.unvalidated(**ERROR),
                                                  cuda_error=False, oom=True)),
     {"op": "trial", "ok": False, "error": ERROR, "cuda_error": False, "oom": True, **CHECKS}, msg.TrialReply, []),
    ("not built", checked(msg.Reply.unvalidated(
        op="load", ok=False, error=msg.ErrorInfo.unvalidated(**{**ERROR, "kind": msg.FailureKind.NOT_BUILT}),
        cuda_error=False, oom=False)),
     {"op": "load", "ok": False, "error": {**ERROR, "kind": "not_built"}, "cuda_error": False, "oom": False,
      **CHECKS}, msg.LoadReply, []),
    ("rejected output", checked(msg.Reply.unvalidated(op="go", ok=True, rejected_output="forward returned a view")),
     {"op": "go", "ok": True, "rejected_output": "forward returned a view", **CHECKS}, msg.GoReply, []),
    ("build", msg.BuildReply.unvalidated(ok=True, tripwire_hits=[], seconds=3.5),
     {"ok": True, "tripwire_hits": [], "seconds": 3.5}, msg.BuildReply, []),
    ("failed build", msg.BuildReply.unvalidated(ok=False, build_failed=True, error=msg.ErrorInfo.unvalidated(**ERROR),
                                                tripwire_hits=["aten::kl_div"], seconds=2.0),
     {"ok": False, "build_failed": True, "error": ERROR, "tripwire_hits": ["aten::kl_div"], "seconds": 2.0},
     msg.BuildReply, []),
]


def written(send: Any, message: Any, payloads: list[bytes]) -> bytes:
    """Everything `send` wrote into a pipe."""
    r, w = os.pipe()
    try:
        send(w, message, payloads)
        os.close(w)
        chunks = []
        while chunk := os.read(r, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(r)


@pytest.mark.parametrize(("name", "reply", "legacy", "model", "payloads"), CASES, ids=[c[0] for c in CASES])
def test_a_reply_from_its_model_is_the_bytes_of_the_dict_it_replaced(name: str, reply: Any, legacy: dict[str, Any],
                                                                      model: type, payloads: list[bytes]) -> None:
    assert written(msg.send, reply, payloads) == written(msg.send_header, legacy, payloads)


@pytest.mark.parametrize(("name", "reply", "legacy", "model", "payloads"), CASES, ids=[c[0] for c in CASES])
def test_the_parent_parses_each_reply_as_the_type_it_waits_for(name: str, reply: Any, legacy: dict[str, Any],
                                                               model: type, payloads: list[bytes]) -> None:
    r, w = os.pipe()
    try:
        msg.send(w, reply, payloads)
        header, received = msg.receive(r, deadline=None)
    finally:
        os.close(r)
        os.close(w)
    parsed = msg.parse_reply(header, model)
    failed = legacy.get("ok") is False or "rejected_output" in legacy
    assert type(parsed) is (msg.Reply if failed and model is not msg.BuildReply else model)
    assert received == payloads and parsed.payload_sizes == [len(p) for p in payloads]
    # Every field the child set arrives with its value (validated now, as the parent validates it).
    assert parsed.model_dump(exclude={"payload_sizes"}, exclude_unset=True) == json.loads(json.dumps(legacy))


def test_every_reply_type_has_a_case() -> None:
    replies = {cls for cls in vars(msg).values()
               if isinstance(cls, type) and (issubclass(cls, msg.Reply) or cls is msg.BuildReply)}
    assert replies - {type(reply) for _, reply, *_ in CASES} == set()


def test_a_field_the_model_lacks_is_refused_where_the_reply_is_built() -> None:
    with pytest.raises(TypeError, match="GoReply has no field time"):
        msg.GoReply.success(time=1.0)


def test_the_child_does_not_validate_what_the_parent_will() -> None:
    """A candidate's nine-dimension output: the parent refuses the reply (tamper_detected, rule "protocol"), as it
    did when the child wrote dicts; the child does not turn it into an exception of its own."""
    reply = msg.GoReply.success(dtype="float32", shape=[1] * 9, time_ms=0.1, times_ms=[0.1], host_ms=0.2,
                                event_ms=None, hidden_work=False)
    r, w = os.pipe()
    try:
        msg.send(w, reply, [b""])
        header, _ = msg.receive(r, deadline=None)
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(msg.ProtocolError, match="malformed GoReply: shape"):
        msg.parse_reply(header, msg.GoReply)
