"""What runs inside the isolated child process: import the candidate, run it, time it, report.

THREAT MODEL. Everything in this process is untrusted once the candidate module is imported: the
candidate can patch any Python object, write to any file descriptor we hold, start threads, call
`os._exit`. So this process computes nothing that decides a verdict:

- it never computes the reference (no correct answer exists in this process to copy or to find in
  freed memory); the trusted parent computes fp64 ground truth from the same seeds;
- it hands back raw bytes of outputs and fingerprints of inputs; the parent rebuilds and compares;
- seeds arrive after the candidate is imported, one per trial and one per timed call, each only when
  its call is about to run, so nothing can be precomputed or reused (see sandbox/execution/phases.py); a timed
  call's inputs are made inside `go`'s batch, before its calls, so they do not exist anywhere in this process
  before the measured batch: whatever of the candidate's runs (a hook, a finaliser, a tracer, a native thread)
  and whenever it runs, work on them happens inside what the judge measures (sandbox/child/timing.py);
- the objects it relies on (timers, synchronisation, tensor methods, its own functions) are captured
  before the import and verified unchanged after every step (`Integrity`); a change is reported as
  tampering, and so is a hook through which candidate code would run inside the harness's own steps,
  such as making a timed call's inputs: a tracer, a profiler, a torch mode left entered, a kernel
  registered in the dispatcher for an operator the harness uses, a gc callback, a signal handler;
- the judge's audit hook (sandbox/child/audit.py) is installed before all of that: it refuses any other audit
  hook, tracer or profiler, and records candidate code taking a frame or walking the garbage collector,
  the ways to the harness's own state (the timing loop's locals, this process's `Child`); the harness's
  instances are sealed in it, out of reach of frames;
- each timed call's output is copied out inside the timing window (sandbox/child/window.py), so work deferred
  past the batch's last event changes nothing reported, and is itself reported;
- the task's forbidden operators are replaced in the dispatcher by tripwires before the import: a call
  from Python or from C++ through the dispatcher raises and is recorded, even if the candidate catches
  the error;
- torch's extension builder may only load what the build stage built: a compile here would hold the
  device for the length of a build, so it is refused (sandbox/child/no_build.py) and the import is bounded in
  seconds by the parent (JudgeConfig.load_timeout_s);
- the parent bounds what this process claims about time with its own clock around each timed call
  (`arm` prepares buffers, `go` makes each call's inputs and runs it, `inspect` checks afterwards) and with the
  device time of the judge's own work inside `go` (the parent makes the same inputs itself), and the isolation layer
  bounds what it can reach (no network, no host files, limited memory, processes, time and output).

What remains possible for code in this process is written down in docs/threat-model.md.

The harness's parts, each its own module of this room: `Integrity` (integrity.py), the dispatcher's operators and
tripwires (operators.py), the threads and processes counted at every reply (census.py), a timed batch's state
(batch.py), failures as replies (failures.py); the build child is build/compile.py.
"""

from __future__ import annotations

import os
import re
import sys
import time
import types
from typing import Any, Callable

import torch

from reference import TaskId, get_task
from sandbox.child import audit as _audit
from sandbox.child import code_origins as _code_origins
from sandbox.child import hook_registries as _hook_registries
from sandbox.child import recorder as _recorder
from sandbox.shared import compare as _compare
from sandbox.shared import languages as _languages
from sandbox.child import loading as _loading
from sandbox.child import no_build as _no_build
from sandbox import protocol as _protocol
from sandbox.child import timing as _timing
from sandbox.shared import timing as _shared_timing
from sandbox.child import window as _window
from sandbox.child import batch as _batch
from sandbox.child import census as _census
from sandbox.child import failures as _failures
from sandbox.child import integrity as _integrity
from sandbox.child import operators as _operators
from sandbox.child.batch import Armed, DeviceMemory, null_model
from sandbox.child.census import native_threads, other_processes, python_threads
from sandbox.child.failures import OutputRejected, error_info
from sandbox.child.integrity import Integrity
from sandbox.child.operators import Tripwires, harness_operators

_CUSTOM_OP = re.compile(r"[A-Za-z_]\w*::[A-Za-z_]\w*(\.\w+)?")
_TORCH_NAMESPACES = frozenset({"aten", "prim", "prims", "profiler", "c10d", "_c10d_functional", "inductor",
                               "quantized", "cuda", "triton", "torch", "autograd", "_quantized", "mkldnn"})
_BUILD_DIR = os.path.dirname(os.environ["TORCH_EXTENSIONS_DIR"]) if os.environ.get("TORCH_EXTENSIONS_DIR") else None
"""The candidate's build directory (its /build): read before the import, in a module Integrity watches."""



def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


# --- the child --------------------------------------------------------------------------------------

def create_context(device: torch.device) -> None:
    """The device context and torch's thread pools: created once, by the first call (later calls are cheap)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.zeros(1, device=device).add_(1)
    torch.ones(1 << 16).sum()


class Child:
    SEALED = ("task", "device", "source_path", "res_fd", "build_guard", "tripwires", "clock", "memory", "integrity",
              "preloaded_modules", "base_python_threads", "base_native_threads", "kernel_names", "findings",
              "recorder")
    """The attributes that never change once the candidate is imported: sealed in the audit hook at `load`."""

    def __init__(self, task_id: TaskId, device: str, source_path: str, res_fd: int) -> None:
        # First: before any snapshot, and long before the candidate exists. Nothing it could write is trusted.
        _audit.install(untrusted=(os.getcwd(), os.path.dirname(os.path.abspath(source_path)), _BUILD_DIR or ""))
        self.task = get_task(task_id)
        self.device = torch.device(device)
        self.source_path = source_path
        self.res_fd = res_fd
        self.model: torch.nn.Module | None = None
        self.armed: Armed | None = None
        """The batch `arm` prepared, until `go` runs it."""
        self.ran: list[list[torch.Tensor]] | None = None
        """The last batch's inputs, made inside `go`, until `inspect` fingerprints them."""
        self.peak: int | None = None
        """The last batch's most device memory a call allocated beyond what existed before it."""
        self.window_outputs: tuple[list[object], tuple[_window.Kept, ...]] = ([], ())
        """The last batch's outputs and what was kept of them inside the window, until `inspect` compares them."""
        self.findings: list[str] = []
        """Tampering the harness found itself (its timing state edited, outputs changed after the window)."""
        self.extension_modules: frozenset[str] = frozenset()
        self.kernel_names: frozenset[str] = frozenset()
        """Read at `load`: a pre-started child (sandbox/execution/warm.py) exists before the candidate's file does."""
        self.setup_s: dict[str, float] = {}
        """What each step of this set-up took (reported in `Ready`)."""
        mark = time.monotonic()
        self.build_guard = _no_build.install()  # before Integrity, which watches it
        self.tripwires = Tripwires(self.task.forbidden_aten_ops)
        mark = self._setup_step("tripwires", mark)
        create_context(self.device)  # before counting the threads (a spare may have created it already)
        mark = self._setup_step("context", mark)
        traced = os.environ.get("JUDGE_TRACE") == "1"
        self.clock = _timing.DeviceClock(self.device, traced=traced)
        self.memory = DeviceMemory(self.device) if self.device.type == "cuda" else None
        mark = self._setup_step("clock", mark)
        # The kernel trace (sandbox/child/recorder.py): its probe runs now, while no candidate exists, so what it
        # reports about this host is the judge's own finding.
        self.recorder = _recorder.Recorder(self.device) if traced else None
        self.trace_probe = self.recorder.probe() if self.recorder is not None else ""
        self.tracing = False
        """Set at `load` when the parent asked for the trace: the marks are then made."""
        mark = self._setup_step("trace_probe", mark)
        self.integrity = Integrity(self._watched_modules(), harness_operators(self.task, self.device,
                                                                              also=self._probe))
        self._setup_step("harness_probe", mark)
        self.preloaded_modules = {name.split(".")[0] for name in sys.modules}
        self.base_python_threads = python_threads()
        self.base_native_threads = native_threads()

    def _watched_modules(self) -> list[types.ModuleType]:
        """The judge's modules in this process whose contents candidate code must leave alone."""
        return [_timing, _shared_timing, _protocol, _compare, _no_build, _audit, _code_origins, _hook_registries,
                _window, _recorder, _integrity, _operators, _failures, _census, _batch, sys.modules[__name__]]

    _harness_probe: Callable[[], object] | None = None
    """What the judge runs besides the task's harness (`harness_operators`' `also`): a subclass's checks."""

    def _probe(self) -> None:
        """`harness_operators`' `also`: a timed batch's own operators (the clock's flush, what the window keeps
        and reads back), then a subclass's."""
        self.clock.flush()
        out = torch.zeros(self.task.output_shape, dtype=self.task.output_dtype, device=self.device)
        keeper = self._keeper(1, check=False)
        keeper.take(0, out, [])
        _window.changed_after([out], keeper.close())
        if self.recorder is not None:
            self.recorder.exercise()
        if self._harness_probe is not None:
            self._harness_probe()

    def _keeper(self, calls: int, shape: tuple[int, ...] = (), *, check: bool = True) -> _window.Keeper:
        """Host buffers for a batch's outputs, made at `arm`; at the batch's end, inside the window, the
        quick hook check (what could still run after the window closes). `check=False`: the probe's."""
        hooks = self.integrity.hooks if check else None
        return _window.Keeper(self.device, self.task.output_shape, self.task.output_dtype, calls, self._leaf(shape),
                              at_close=(lambda: _hook_registries.active_hooks(hooks, quick=True)) if check else None)

    def _leaf(self, shape: tuple[int, ...]) -> tuple[int, tuple[int, ...], torch.dtype] | None:
        """What a training step's window samples (sandbox/child/training.py); a forward's has nothing."""
        return None

    def _setup_step(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.setup_s[name] = self.setup_s.get(name, 0.0) + now - since
        return now

    def _declared_kernels(self) -> set[str]:
        """The kernels the candidate's source declares, in every language, as each names them on the device
        (CUDA __global__, @triton.jit, @cute.kernel, @T.prim_func: sandbox/shared/languages.py)."""
        with open(self.source_path, encoding="utf-8") as fh:
            return set(_languages.kernel_names(fh.read()))

    # Every reply carries what the parent needs to decide policy and tampering (the `go` reply excepted:
    # it is inside the parent's timing window, and the `inspect` right after it carries the checks).
    # The integrity checks come last: listing /proc raises audit events, and nothing may run after the checks.
    def reply(self, message: _protocol.Reply, payloads: list[bytes] | None = None, *, lean: bool = False) -> None:
        if lean:
            found = self.findings + _audit.findings()[0]
            _protocol.send(self.res_fd, message.model_copy(update={"tampered": found}) if found else message, payloads)
            return
        checks: dict[str, Any] = {
            "python_threads": python_threads() - self.base_python_threads,
            "native_threads": native_threads() - self.base_native_threads,
            "processes": other_processes(),
        }
        hits = set(self.tripwires.hits) | set(_audit.findings()[1])
        checks.update(tampered=self.integrity.changed() + self.findings, tripwire_hits=sorted(hits))
        _protocol.send(self.res_fd, message.model_copy(update=checks), payloads)

    def load(self, cmd: _protocol.Load) -> _protocol.LoadReply:
        """Import the candidate and build ModelNew on the device; nothing is compiled here (sandbox/child/no_build.py).

        An extension the build stage did not build fails the load with `NotBuilt`, even when the candidate
        caught it and went on (or failed later for want of it): that refusal is the answer a person needs."""
        self.kernel_names = frozenset(self._declared_kernels())
        if cmd.trace_key is not None and self.recorder is not None:
            self.recorder.start(bytes.fromhex(cmd.trace_key))  # before the import: the candidate's whole life
            self.tracing = True
        self._seal()
        try:
            self.model = _loading.load_model(self.source_path, self.device)
        except Exception:
            self.build_guard.raise_if_refused()
            raise
        self.build_guard.raise_if_refused()
        self.extension_modules = frozenset(self._built_extensions())
        return _protocol.LoadReply.success(extensions=sorted(self.extension_modules))

    def _seal(self) -> None:
        """Hand the harness's instances to the audit hook, which keeps their attributes where no frame reaches:
        one replaced later (the clock's overhead, the snapshot Integrity compares with) is reported."""
        _audit.seal("the child", self, self.SEALED)
        _audit.seal("the timing clock", self.clock)
        _audit.seal("the integrity snapshot", self.integrity)
        _audit.seal("the tripwires", self.tripwires)
        if self.recorder is not None:
            _audit.seal("the trace recorder", self.recorder, ("device", "cuda", "activities", "_source", "_target",
                                                              "_key"))

    def _built_extensions(self) -> set[str]:
        """Names of the shared libraries the candidate built under the build dir.

        load_inline does not register its module in sys.modules, but pybind11 functions carry the
        extension's name in `__module__`; names that shadow a module we had already imported (a
        candidate calling its extension "torch") do not count. The build dir is the one torch's extensions
        are built under (`_BUILD_DIR`), not the source's: the judged source lives apart from the build, in a
        file the candidate cannot write (sandbox/build/compiler.py).
        """
        build_dir = _BUILD_DIR or os.path.dirname(os.path.abspath(self.source_path))
        names = set()
        for root, _, files in os.walk(build_dir):
            names |= {f.split(".", 1)[0] for f in files if f.endswith(".so")}
        return {n for n in names if n not in self.preloaded_modules}

    def _inputs(self, cmd: _protocol.Trial | _protocol.Estimate) -> list[torch.Tensor]:
        return self.task.make_inputs(tuple(cmd.shape), cmd.distribution, cmd.seed, self.device)

    def _output_payload(self, out: Any, inputs: list[torch.Tensor],
                        kept: _window.Kept | None = None) -> tuple[dict[str, Any], bytes]:
        """The output's dtype, shape and bytes, refused unless it is a plain tensor on the inputs' device sharing no
        memory with them. `kept`: a timed call's bytes as copied inside the window, reported instead of a read now."""
        if type(out) is not torch.Tensor:
            raise OutputRejected(f"forward returned {type(out).__module__}.{type(out).__qualname__}, "
                            "not a plain torch.Tensor")
        where = inputs[0].device if inputs else self.device
        if out.device != where:
            raise OutputRejected(f"forward returned a tensor on {out.device}, inputs are on {where}")
        lo, hi = _storage_span(out)
        for i, tensor in enumerate(inputs):
            in_lo, in_hi = _storage_span(tensor)
            if lo < in_hi and in_lo < hi:
                raise OutputRejected(f"forward returned a view of (or memory shared with) input {i}")
        if kept is not None and kept.output is not None:
            return {"dtype": _compare.dtype_name(out.dtype), "shape": list(out.shape)}, kept.output
        host = out.detach().clone().cpu().contiguous()
        meta = {"dtype": _compare.dtype_name(host.dtype), "shape": list(host.shape)}
        return meta, host.view(-1).view(torch.uint8).numpy().tobytes()

    def _profiled(self, fn: Callable[[], Any]) -> tuple[Any, set[str], set[str]]:
        """fn() under the profiler and sys.setprofile: (result, calls into built extensions, event names)."""
        calls: set[str] = set()
        modules = self.extension_modules

        def watch(frame: Any, event: str, arg: Any) -> None:
            if event == "c_call" and getattr(arg, "__module__", None) in modules:
                calls.add(f"{arg.__module__}.{getattr(arg, '__name__', '?')}")

        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        if self.tracing:  # one profiler at a time: the life trace's segment ends here and a new one starts after
            self.recorder.pause()
        try:
            with torch.profiler.profile(activities=activities) as prof:
                sys.setprofile(watch)
                try:
                    result = fn()
                finally:
                    sys.setprofile(None)
                self.clock.synchronize()
        finally:
            if self.tracing:
                self.recorder.resume()
        return result, calls, {evt.name for evt in prof.events()}

    def _evidence(self, calls: set[str], names: set[str]) -> tuple[list[str], list[str], list[str]]:
        """(calls into built extensions, operators the candidate registered itself, its kernels that ran).
        Its own operators (TORCH_LIBRARY) are "myext::op", in a namespace of its own; device kernel names
        ("void at::native::reduce_kernel<...>") also contain "::" and never count."""
        ops = sorted(n for n in names
                     if _CUSTOM_OP.fullmatch(n) and n.split("::")[0] not in _TORCH_NAMESPACES)
        kernels = sorted(n for n in names if any(k in n for k in self.kernel_names))
        return sorted(calls), ops, kernels[:20]

    def trial(self, cmd: _protocol.Trial) -> tuple[_protocol.TrialReply, list[bytes]]:
        inputs = self._inputs(cmd)
        before = _compare.fingerprint(inputs)
        out, calls, names = self._profiled(lambda: self.model(*inputs))
        meta, payload = self._output_payload(out, inputs)
        after = _compare.fingerprint(inputs)
        calls_, ops, kernels = self._evidence(calls, names)
        return _protocol.TrialReply.success(**meta, before=before, after=after, custom_calls=calls_, custom_ops=ops,
                                            custom_kernels=kernels), [payload]

    def estimate(self, cmd: _protocol.Estimate) -> _protocol.EstimateReply:
        inputs = self._inputs(cmd)
        times = _timing.time_calls(self.clock, lambda: self.model(*inputs), reps=3, warmup=1)
        return _protocol.EstimateReply.success(estimate_ms=sorted(times.times_ms)[1])

    # One timed batch is three messages: `arm` (the window's buffers; no inputs, no seeds), `go` (every call's inputs
    # made from the seeds `go` carries, then the calls, timed; answered at once), `inspect` (the inputs fingerprinted,
    # integrity checks). The parent's clock runs from sending `go` to reading its reply.
    def arm(self, cmd: _protocol.Arm) -> _protocol.ArmReply:
        if not cmd.null and self.model is None:
            raise RuntimeError("arm before load")
        keeper = self._keeper(cmd.calls, tuple(cmd.shape))
        self.armed = Armed(calls=cmd.calls, shape=tuple(cmd.shape), null=cmd.null, forward_only=cmd.forward_only,
                           keeper=keeper)
        self.clock.synchronize()
        return _protocol.ArmReply.success()

    def _take_armed(self, cmd: _protocol.Go) -> Armed:
        armed, self.armed = self.armed, None
        if armed is None:
            raise RuntimeError("go without arm")
        if len(cmd.calls) != armed.calls or tuple(cmd.shape) != armed.shape:
            raise RuntimeError(f"go for {len(cmd.calls)} calls of shape {cmd.shape}, {armed.calls} of {armed.shape} "
                               "armed")
        return armed

    def go(self, cmd: _protocol.Go) -> tuple[_protocol.GoReply, list[bytes]]:
        armed = self._take_armed(cmd)
        model = null_model(self.device) if armed.null else self.model
        shape = tuple(cmd.shape)
        # Plain closures, made by the interpreter: nothing the candidate could have patched runs between here and the
        # clock (a patched functools.partial could do a call's work before it is timed).
        run = lambda inputs, m=model: m(*inputs)  # noqa: E731 - a plain closure (above)
        calls = [_timing.Call(self._maker(shape, c.distribution, c.seed), run) for c in cmd.calls]
        # The empty calls read the allocator's counters too: an empty batch is the judge's whole own work in a round
        # trip, the span before its first call included (the parent charges a real one only beyond it).
        batch = _timing.time_batch(self.clock, calls, keep=armed.keeper, marks=self.marks(model), memory=self.memory)
        self._after_window(batch, armed.keeper)
        self.peak = batch.peak
        return self._batch_reply(batch, batch.inputs)

    def _maker(self, shape: tuple[int, ...], distribution: str, seed: int) -> Callable[[], list[torch.Tensor]]:
        """A timed call's input-making, run inside the batch before its calls. The empty calls of calibration make
        real inputs too: an empty batch is the judge's whole own work in a round trip, so what a real one costs
        beyond it is the candidate's (on the CPU, evicting the cache after the inputs were written costs more than
        evicting it idle: ~1.1 ms more a call for kl_div's at the CPU size, measured with thread_time)."""
        make, device = self.task.make_inputs, self.device
        return lambda: make(shape, distribution, seed, device)

    def marks(self, model: object) -> _recorder.Recorder | None:
        """The trace's marks for a batch of the candidate's calls (none for the empty calls of calibration). On the
        CPU the trace records (its segments are read back) without marks, which would only add host time between
        the calls the parent's clock surrounds."""
        return self.recorder if self.tracing and self.recorder.cuda and model is self.model else None

    def trace_end(self, cmd: _protocol.TraceEnd) -> _protocol.TraceEndReply:
        """Stop the trace and export its last segment: the parent reads the files (sandbox/execution/tracing.py)."""
        if not self.tracing:
            return _protocol.TraceEndReply.success(files=[], calls=0, canaries=0)
        self.tracing = False
        return _protocol.TraceEndReply.success(**self.recorder.finish())

    def _after_window(self, batch: _timing.BatchTime, keeper: _window.Keeper) -> None:
        """What the batch's end found (its timing state edited, a hook still installed), and the outputs with what
        was kept of them, for `inspect` to compare once the harness has run again."""
        self.findings.extend(batch.tampered)
        self.findings.extend(keeper.findings)
        self.window_outputs = (list(batch.results), batch.kept)
        self.ran = batch.inputs

    def _batch_reply(self, batch: _timing.BatchTime,
                     sets: list[list[torch.Tensor]]) -> tuple[_protocol.GoReply, list[bytes]]:
        """`go`'s reply: every call's output (each refused if it aliases any input of the batch) and the times.

        Built inside the parent's wall window around `go` (its clock runs until this reply is read), unvalidated:
        scripts/bench/reply_cost.py measured what that costs beside the dict the child built before."""
        everything = [t for inputs in sets for t in inputs]
        payloads, meta = [], {}
        for out, kept in zip(batch.results, batch.kept or [None] * len(batch.results)):
            meta, payload = self._output_payload(out, everything, kept)
            payloads.append(payload)
        return _protocol.GoReply.success(**meta, time_ms=batch.mean_ms, times_ms=batch.times_ms, host_ms=batch.host_ms,
                                         event_ms=sum(batch.events_ms) / len(sets) if batch.events_ms else None,
                                         hidden_work=batch.hidden_work, made_ms=batch.made_ms,
                                         gaps_ms=batch.gaps_ms), payloads

    def inspect(self, cmd: _protocol.Inspect) -> _protocol.InspectReply:
        sets, self.ran = self.ran, None
        if sets is None:
            raise RuntimeError("inspect without go")
        after = [_compare.fingerprint(inputs) for inputs in sets]
        self._compare_kept()
        return _protocol.InspectReply.success(after=after[0] if after else [], after_all=after,
                                              peak_memory_bytes=self.peak)

    def _compare_kept(self) -> None:
        """After the harness has run again (fingerprints allocate, which is when an allocator callback would launch
        deferred kernels): an output that differs from its copy made inside the window became right too late."""
        self.clock.synchronize()
        self.findings.extend(_window.changed_after(*self.window_outputs))
        self.window_outputs = ([], ())

    def calibrate(self, cmd: _protocol.Calibrate) -> _protocol.CalibrateReply:
        """Before the candidate exists: the clocks' overhead, and what making a timed call's inputs costs the host,
        which sizes the lead before each timed call."""
        overhead = self.clock.calibrate(cmd.reps)
        host_ms = self._making_cost(tuple(cmd.shape), cmd.distributions) if cmd.shape else 0.0
        self.clock.learn_making(host_ms)
        return _protocol.CalibrateReply.success(host_overhead_ms=overhead, flush_ms=self.clock.flush_ms,
                                                lead_ms=self.clock.lead_ms, make_host_ms=host_ms)

    def _making_cost(self, shape: tuple[int, ...], distributions: list[str]) -> float:
        """The host's time to queue (GPU: no synchronisation inside it) or do (CPU) the making of one timed call's
        inputs: each distribution's median of MAKE_PROBES, the slowest distribution's."""
        slowest = 0.0
        for distribution in distributions:
            times = []
            for seed in range(MAKE_PROBES):
                self.clock.synchronize()
                started = time.perf_counter()
                inputs = self.task.make_inputs(shape, distribution, seed, self.device)
                times.append((time.perf_counter() - started) * 1e3)
                del inputs
            slowest = max(slowest, sorted(times)[len(times) // 2])
        self.clock.synchronize()
        return slowest


MAKE_PROBES = 3
"""Times each timed distribution's inputs are made at calibration, to learn what that costs the host."""


def serve(child: Child, cmd_fd: int) -> None:
    handlers = {"calibrate": child.calibrate, "load": child.load, "trial": child.trial, "estimate": child.estimate,
                "arm": child.arm, "go": child.go, "inspect": child.inspect, "trace_end": child.trace_end}
    if hasattr(child, "grad_check"):  # training tasks (sandbox/execution/training.py)
        handlers["grad_check"] = child.grad_check
    while True:
        header, _ = _protocol.receive(cmd_fd)
        cmd = _protocol.parse_command(header)
        op = cmd.op
        if op == "exit":
            return
        try:
            result = handlers[op](cmd)
        except OutputRejected as exc:
            child.reply(_protocol.Reply.unvalidated(op=op, ok=True, rejected_output=str(exc)))
            continue
        except BaseException as exc:  # noqa: BLE001 - every candidate failure becomes a reply, not a crash
            if isinstance(exc, KeyboardInterrupt):
                raise
            child.reply(_protocol.Reply.unvalidated(
                op=op, ok=False, error=error_info(exc),
                cuda_error=hasattr(torch, "AcceleratorError") and isinstance(exc, torch.AcceleratorError),
                oom=isinstance(exc, torch.OutOfMemoryError)))
            if isinstance(exc, SystemExit) or op == "load" or "CUDA error" in str(exc):
                return  # the process state (or the CUDA context) is not fit for another step
            continue
        message, payloads = result if isinstance(result, tuple) else (result, [])
        child.reply(message, payloads, lean=op == "go")
