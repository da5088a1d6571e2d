"""The parent/child wire format and messages: length-prefixed JSON headers, raw byte payloads, typed models.

Nothing here unpickles or evaluates: the parent reads at most `limit` bytes, parses JSON, and builds
tensors from raw bytes with a dtype and shape it validates itself. Everything the child sends is
untrusted: a candidate running in the child can write to the same pipe.
"""

from __future__ import annotations

import enum
import json
import os
import select
import struct
import time
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

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


def send_header(fd: int, header: dict[str, Any], payloads: list[bytes] | None = None) -> None:
    """The framing alone: `header` as JSON (with its payloads' sizes added), then the payloads. The parent sends its
    commands this way (`model_dump()`); a reply is sent with `send`."""
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


# --- typed messages -------------------------------------------------------------------------------
#
# Every message is declared once here. Commands go parent -> child (trusted both ways, typed for the
# reader); replies go child -> parent and are UNTRUSTED: the parent validates each one against the model
# of the reply it is waiting for (`parse_reply`) and treats a reply that does not fit as tampering.
# Models are strict (no "1.5" -> 1.5 coercion) and forbid unknown fields, so a forged or corrupted
# message fails loudly at the boundary instead of deep inside the verdict logic.

class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @classmethod
    def unvalidated(cls, **fields: Any) -> Self:
        """The model built without validation: how the child builds its replies (`Reply.success`).

        The child does not judge what it sends; the parent validates every reply against this same model, and one
        that does not fit is the parent's verdict (tamper_detected, rule "protocol"). Validating here would move
        that verdict into the child (a candidate's output of nine dimensions would fail `Shape` in the child and
        come back as a runtime_error), and would cost microseconds inside the parent's wall window around `go`
        (scripts/bench/reply_cost.py). A field name the model lacks is still refused: `model_construct` would
        drop it silently."""
        unknown = fields.keys() - cls.model_fields.keys()
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
        return cls.model_construct(**fields)


Shape = Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=8)]
Fingerprints = Annotated[list[Annotated[str, Field(max_length=200)]], Field(max_length=16)]
Names = Annotated[list[Annotated[str, Field(max_length=2000)]], Field(max_length=1000)]


class Calibrate(Message):
    """Before the candidate exists: measure the clocks' own overhead, and what making a timed call's inputs costs
    the host (`shape` and `distributions`: the timing's), which sizes the lead before each timed call
    (sandbox/child/timing.py, `DeviceClock.size_lead`)."""

    op: Literal["calibrate"] = "calibrate"
    reps: int
    shape: Shape = []
    distributions: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=16)] = []


class Load(Message):
    """Import the candidate and build ModelNew: from here on the child is untrusted."""

    op: Literal["load"] = "load"
    trace_key: str | None = None
    """Hex key of this candidate's kernel-trace canaries (sandbox/child/recorder.py): the recorder starts before the
    import. None: no trace."""


class Trial(Message):
    """One correctness trial: generate inputs from the seed, call once, return output and fingerprints."""

    op: Literal["trial"] = "trial"
    shape: Shape
    distribution: str
    seed: int


class Estimate(Message):
    """A few untimed-for-score calls on one input set, to size the timing plan."""

    op: Literal["estimate"] = "estimate"
    shape: Shape
    distribution: str
    seed: int


MAX_BATCH = 64
"""Most timed calls in one batch."""


class ArmedCall(Message):
    """One timed call of a batch: its own distribution and a seed the child has not seen."""

    distribution: Annotated[str, Field(max_length=64)]
    seed: int


class Arm(Message):
    """Prepare a batch of `calls` timed calls: the host buffers its window copies the outputs into, and (training) the
    gradients it keeps. No inputs and no seeds: each call's inputs are made inside `go`, just before the call (issue
    39: work done on them before `go` is impossible, not merely forbidden).

    `null` arms do-nothing calls without inputs (before the candidate is loaded): the parent measures what a round
    trip costs around calls that take no time.
    """

    op: Literal["arm"] = "arm"
    calls: Annotated[int, Field(ge=1, le=MAX_BATCH)]
    shape: Shape
    null: bool = False
    forward_only: bool = False
    """Training tasks: time the forward alone (the loss, with grad enabled), not forward + backward."""


class Go(Message):
    """Run the armed batch now: make every call's inputs from its seed, then the calls, timed (sandbox/execution/
    timing.py, `time_batch`); reply at once with the outputs and the measured times."""

    op: Literal["go"] = "go"
    shape: Shape
    calls: Annotated[list[ArmedCall], Field(min_length=1, max_length=MAX_BATCH)]


class Inspect(Message):
    """After a timed call: fingerprint its inputs again and report the integrity checks."""

    op: Literal["inspect"] = "inspect"


class Exit(Message):
    op: Literal["exit"] = "exit"


class TraceEnd(Message):
    """After the timing: stop the kernel trace and export its last segment (sandbox/child/recorder.py)."""

    op: Literal["trace_end"] = "trace_end"


class Begin(Message):
    """A pre-started child (sandbox/execution/warm.py), waiting with torch imported and the device untouched: set up for
    `task` on the device now. The judge sends it when no candidate is being timed on that device."""

    op: Literal["begin"] = "begin"
    task: str


class GradCheck(Message):
    """Training tasks, after a trial or a timed batch: report the gradient a step left (sandbox/execution/training.py).

    Sent only after the step ran, so the candidate cannot know `weight_seed` or `rows` while it computes:
    the child returns, in fp64, every row of the gradient projected on weights drawn from `weight_seed`,
    and the raw fp32 bytes of the sampled `rows`.
    """

    op: Literal["grad_check"] = "grad_check"
    rows: Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=1 << 20)]
    weight_seed: int
    call: Annotated[int, Field(ge=0, lt=MAX_BATCH)] = 0
    """Which step of the last timed batch (a trial is a batch of one)."""


Command = Annotated[Calibrate | Load | Trial | Estimate | Arm | Go | Inspect | GradCheck | Begin | TraceEnd | Exit,
                    Field(discriminator="op")]
_COMMAND = TypeAdapter(Command)


def parse_command(header: dict[str, Any]) -> Command:
    header = {k: v for k, v in header.items() if k != "payload_sizes"}
    return _COMMAND.validate_python(header)


class FailureKind(enum.StrEnum):
    """Failures the child names itself because the parent's verdict for them is not runtime_error.

    Claimed by an untrusted process: a candidate that forges one only chooses a worse verdict for itself."""

    NOT_BUILT = "not_built"
    """An extension the build stage did not build; the child refused to compile it (sandbox/child/no_build.py):
    compile_error."""


class ErrorInfo(Message):
    type: str
    message: str
    where: str | None = None
    traceback: str = ""
    kind: Annotated[FailureKind | None, Field(strict=False)] = None
    """Set for the failures of `FailureKind` (validated from its JSON string)."""


class Reply(Message):
    """What every reply carries: success, and what the parent needs to decide policy and tampering.

    The integrity fields are empty on a `GoReply` (kept lean: it is inside the parent's timing window);
    the `InspectReply` that follows each timed call carries them.
    """

    op: str
    ok: bool
    payload_sizes: list[Annotated[int, Field(ge=0)]] = []
    # The common fields in the order the wire has them, after the reply's own (`wire_header`).
    error: ErrorInfo | None = None
    cuda_error: bool = False
    oom: bool = False
    rejected_output: str | None = None
    """forward() returned something that is not a plain, fresh tensor on the right device."""
    python_threads: int = 0
    native_threads: int = 0
    processes: Names = []
    tampered: Names = []
    tripwire_hits: Names = []

    @classmethod
    def success(cls, **fields: Any) -> Self:
        """An ok reply of this type, its `op` read from the model, built unvalidated (`Message.unvalidated`)."""
        return cls.unvalidated(op=op_of(cls), ok=True, **fields)


class Started(Reply):
    """A pre-started child's first message: interpreter and torch up, the device not touched yet (waits for Begin)."""

    op: Literal["started"]


class Ready(Reply):
    op: Literal["ready"]
    setup_s: dict[Annotated[str, Field(max_length=40)], float] = Field(default={}, max_length=16)
    """Seconds of each step of the child's device set-up (context, tripwires, clock, harness probe): what a
    spare's device phase is made of (sandbox/execution/warm.py)."""
    trace: Annotated[str, Field(max_length=400)] = ""
    """The kernel-trace recorder's probe, before any candidate existed: "available", "unavailable: why", or ""
    (the trace is off)."""


class CalibrateReply(Reply):
    op: Literal["calibrate"]
    host_overhead_ms: float
    flush_ms: float = 0.0
    """A GPU flush's device time (the L2 eviction before each call, and the lead's unit)."""
    lead_ms: float = 0.0
    """The least lead before a batch; with `make_host_ms` it sizes each batch's (sandbox/child/timing.py,
    `lead_flushes`)."""
    make_host_ms: float = 0.0
    """The host's time to queue (GPU) or do (CPU) the making of one timed call's inputs, the slowest distribution's."""


class LoadReply(Reply):
    op: Literal["load"]
    extensions: Names


class TrialReply(Reply):
    op: Literal["trial"]
    dtype: str
    shape: Shape
    before: Fingerprints
    after: Fingerprints
    custom_calls: Names
    custom_ops: Names
    custom_kernels: Names


class EstimateReply(Reply):
    op: Literal["estimate"]
    estimate_ms: Annotated[float, Field(ge=0)]


Batch = Annotated[list[Fingerprints], Field(max_length=MAX_BATCH)]
Spans = Annotated[list[float], Field(max_length=MAX_BATCH)]


class ArmReply(Reply):
    op: Literal["arm"]


class GoReply(Reply):
    """One payload per call, in order. `time_ms` is the batch's claim per call: its calls' mean."""

    op: Literal["go"]
    dtype: str
    shape: Shape
    time_ms: float
    """The child's claim: what a call took (events on a GPU, the host clock on the CPU)."""
    times_ms: Spans = []
    """Each call's own time, in order."""
    host_ms: float
    """The host clock around the whole batch, device-wide synchronisation included, less the judge's own work in it."""
    event_ms: float | None = None
    hidden_work: bool
    made_ms: float = 0.0
    """The judge's span before the first call: GPU, the device from the batch's lead to the first call's start event
    (the lead, the making of every call's inputs, a flush); CPU, the host clock around the making of the inputs."""
    gaps_ms: Spans = []
    """GPU: the device from each call's end event to the next call's start event (its flush, any wait for the host)."""


class TraceEndReply(Reply):
    """What the recorder says it wrote: claimed by an untrusted process, so the parent checks the files alone."""

    op: Literal["trace_end"]
    files: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=512)]
    calls: int
    canaries: int
    recorder_error: Annotated[str, Field(max_length=400)] = ""


class InspectReply(Reply):
    op: Literal["inspect"]
    after: Fingerprints
    after_all: Batch = []
    peak_memory_bytes: int | None = None


class TrainTrialReply(TrialReply):
    """A training task's trial: forward + backward; the evidence of custom code in the backward alone too."""

    backward_custom_calls: Names
    backward_custom_ops: Names
    backward_custom_kernels: Names
    custom_function: bool
    """The loss's autograd graph holds a custom torch.autograd.Function (a fused forward's gradient)."""


class GradCheckReply(Reply):
    """Payloads: the fp64 row projections (batch values), then the fp32 bytes of the requested rows."""

    op: Literal["grad_check"]
    dtype: str
    shape: Shape


class BuildReply(Message):
    """The compile-mode child's one message."""

    ok: bool
    payload_sizes: list[int] = []
    build_failed: bool = False
    error: ErrorInfo | None = None
    tripwire_hits: Names = []
    seconds: float


R = TypeVar("R", bound=BaseModel)

_LEADING = ("op", "ok")
_COMMON = tuple(name for name in Reply.model_fields if name not in {*_LEADING, "payload_sizes"})


_NESTED = frozenset({ErrorInfo})
"""The messages a reply holds as a field (compared by type: isinstance on a model class costs a microsecond)."""


def _set_fields(message: Message) -> dict[str, Any]:
    """The fields its sender set, in the model's order, with the values as given (a nested message as its own)."""
    given = message.__pydantic_fields_set__
    return {name: _set_fields(value) if type(value) in _NESTED else value
            for name, value in message.__dict__.items() if name in given}


def wire_header(message: Reply | BuildReply) -> dict[str, Any]:
    """A reply's JSON header: the fields its sender set, and no others (an unset default stays off the wire).

    The values go to `json.dumps` as the child computed them, as they did when the child built its replies as
    dicts, and the keys keep that order too: `op` and `ok`, the reply's own fields, then the common ones. So the
    bytes on the wire did not change when the child began building models (tests/sandbox/test_reply_wire.py).
    `payload_sizes` is the framing's: `send_header` adds it, last."""
    fields = _set_fields(message)
    fields.pop("payload_sizes", None)
    if not isinstance(message, Reply):
        return fields
    leading = {name: fields.pop(name) for name in _LEADING if name in fields}
    common = {name: fields.pop(name) for name in _COMMON if name in fields}
    return {**leading, **fields, **common}


def send(fd: int, reply: Reply | BuildReply, payloads: list[bytes] | None = None) -> None:
    """The child's one way to answer: a reply model, serialised as `wire_header` says, then its payloads."""
    send_header(fd, wire_header(reply), payloads)


def op_of(model: type[Reply]) -> str:
    """The `op` a reply model answers (its Literal)."""
    return model.model_fields["op"].annotation.__args__[0]


def parse_reply(header: dict[str, Any], model: type[R]) -> R | Reply:
    """Validate an untrusted reply against `model`; a failed step (ok false, rejected output) is a plain `Reply`.

    Raises ProtocolError (the parent's verdict: tamper_detected, rule "protocol") when it does not fit.
    """
    try:
        if model is not BuildReply and (header.get("ok") is not True or header.get("rejected_output") is not None):
            return Reply.model_validate(header)
        return model.model_validate(header)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "message"
        raise ProtocolError(f"malformed {model.__name__}: {where}: {first['msg']}") from None
