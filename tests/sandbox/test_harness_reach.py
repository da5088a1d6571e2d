"""The harness out of the candidate's reach (issue 25): its audit hook, the hook registries without audit events,
the timing loop's own state, and the outputs kept inside the timing window.

The audit hook cannot be removed once added, so its scenarios run in fresh interpreters
(children/reach_probe.py), each with a module playing the candidate from a directory the hook does not trust.
The window's checks run in a real child driven in its own process (children/drive_late_work.py), and end to end
through the judge: a candidate that defers its work to the harness's next allocation is tamper_detected, and an
honest one that warns, logs and formats a traceback is correct. The hostile corpus files c12_* are judged by
test_corpus.py.
"""

from __future__ import annotations

import json
import marshal
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from sandbox import Status, judge
from sandbox.child import timing
from sandbox.child.timing import DeviceClock, time_cpu_batch
from sandbox.child.window import Keeper, changed_after, gradient_changed_after

pytestmark = pytest.mark.slow  # each scenario runs in a fresh interpreter

ROOT = Path(__file__).resolve().parents[2]
CHILDREN = Path(__file__).parent / "children"


def _run(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, str(CHILDREN / script), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=False, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def probe(tmp_path: Path, body: str) -> dict:
    """`body` (the statements of `run(harness)`) run as candidate code under the judge's audit hook."""
    path = tmp_path / "candidate.py"
    path.write_text("import ctypes, gc, inspect, logging, signal, sys, threading, traceback, warnings\n"
                    "import torch\n\n\ndef run(harness):\n" + textwrap.indent(textwrap.dedent(body), "    "))
    return _run("reach_probe.py", str(path))


# --- the audit hook ---------------------------------------------------------------------------------------

def test_libraries_taking_frames_for_themselves_are_not_findings(tmp_path: Path) -> None:
    """warnings, logging, traceback, inspect and torch take frames all the time on the candidate's behalf: only
    a frame handed to candidate code counts."""
    seen = probe(tmp_path, """
        for level in (1, 2, 3, 4):
            warnings.warn(f"stacklevel {level}", stacklevel=level)
        torch.zeros(2).storage()  # torch's TypedStorage deprecation warning
        logging.getLogger("candidate").warning("a log record finds its caller's frame")
        try:
            raise ValueError("caught")
        except ValueError:
            traceback.format_exc()
        traceback.extract_stack()
        inspect.signature(run)
        torch.library.Library("c12_probe", "FRAGMENT")
        return "ran"
    """)
    assert seen["result"] == "ran"
    assert seen["findings"] == [] and seen["hooks"] == [], seen


@pytest.mark.parametrize("taking", [
    "sys._getframe(0).f_back",
    "inspect.currentframe()",
    "inspect.stack()[0].frame",
    "(lambda: (lambda: (lambda: next(traceback.walk_stack(None)))())())()",
    "sys._current_frames()",
    "(x for x in ()).gi_frame",
    "[e.__traceback__.tb_frame for e in [_caught()]]",
    "gc.get_objects()",
    "gc.get_referrers(harness)",
    "gc.get_referents(harness)",
    "setattr(run, '__code__', (lambda harness: 0).__code__)",
])
def test_every_way_to_a_frame_or_the_garbage_collector_is_recorded(tmp_path: Path, taking: str) -> None:
    """Any frame reaches the harness's through f_back (no audit event): the first one taken is what counts."""
    seen = probe(tmp_path, f"""
        def _caught():
            try:
                raise LookupError
            except LookupError as exc:
                return exc
        {taking}
        return "took it"
    """)
    assert seen["result"] == "took it"
    assert len(seen["findings"]) == 1 and "candidate.py:" in seen["findings"][0], seen


DISGUISE = "import sys\nframe = sys._getframe(0)\n"
FUNCTION = "def f():\n    import sys\n    return sys._getframe(0)\n"
"""Module code that takes a frame: run under a trusted module's file name, the frame would pass as os's own."""


@pytest.mark.parametrize("making", [
    "exec(compile(DISGUISE, os.__file__, 'exec'), vars(os), {})",
    "exec(compile(ast.parse(DISGUISE), os.__file__, 'exec'), vars(os), {})",
    "types.FunctionType(_function_code(compile(ast.parse(FUNCTION), os.__file__, 'exec')), vars(os))()",
    "exec(compile(DISGUISE, '<frozen os>', 'exec'), vars(os), {})",
    "exec(compile(DISGUISE, 'x.py', 'exec').replace(co_filename=os.__file__), vars(os), {})",
    "exec(codeop.compile_command(DISGUISE, os.__file__, 'exec'), vars(os), {})",
    "exec(importlib.machinery.SourceFileLoader('os', os.__file__).source_to_code(DISGUISE.encode(), os.__file__),"
    " vars(os), {})",
    "exec(marshal.loads(MARSHALLED), vars(os), {})",
    "_sourceless(MARSHALLED)",
    "_feeding_loader()",
])
def test_code_under_a_trusted_file_name_is_refused_and_recorded(tmp_path: Path, making: str) -> None:
    """`trusted` reads a frame's co_filename: code the candidate makes under a library's file name, run in that
    module's namespace, would take frames unrecorded. Every way to make it is refused where the candidate asks."""
    marshalled = marshal.dumps(compile(DISGUISE, os.__file__, "exec"))
    seen = probe(tmp_path, f"""
        import ast, codeop, importlib.machinery, importlib.util, marshal, os, types
        DISGUISE, FUNCTION = {DISGUISE!r}, {FUNCTION!r}
        MARSHALLED = {marshalled!r}

        def _function_code(module_code):
            return next(c for c in module_code.co_consts if isinstance(c, types.CodeType))

        def _sourceless(data):
            folder = os.path.dirname(os.path.abspath(__file__))
            with open(os.path.join(folder, "disguised.pyc"), "wb") as fh:
                fh.write(importlib.util.MAGIC_NUMBER + bytes(12) + data)
            sys.path.insert(0, folder)
            import disguised  # noqa: F401

        def _feeding_loader():
            class Feeding(importlib.machinery.SourceFileLoader):
                def get_data(self, path):
                    return DISGUISE.encode() if path == os.__file__ else super().get_data(path)

                def path_stats(self, path):
                    raise OSError  # no bytecode cache: compile the "source"
            loader = Feeding("os_again", os.__file__)
            return loader.get_code("os_again")

        try:
            {making}
        except RuntimeError as exc:
            return "refused: " + str(exc)
        return "made it"
    """)
    assert seen["result"].startswith("refused: ") and "refused by the judge" in seen["result"], seen
    assert len(seen["findings"]) == 1 and "refused" in seen["findings"][0], seen


def test_honest_uses_of_compile_and_imports_are_not_findings(tmp_path: Path) -> None:
    """Code compiled under the candidate's own names, string evaluation in the standard library, and imports of
    library modules (from their bytecode caches or their sources) are no findings."""
    seen = probe(tmp_path, """
        import collections, dataclasses, importlib, marshal, os
        exec(compile("y = 1", __file__, "exec"), {})
        exec("z = 2", {})
        eval(compile("1 + 1", "<string>", "eval"))
        code = compile("w = 3", __file__, "exec").replace(co_name="renamed")
        collections.namedtuple("Point", "x y")
        dataclasses.make_dataclass("D", ["a"])
        import json.tool, xml.dom.minidom, email.mime.text  # noqa: F401  (imported after the hook)
        marshal.dumps(1)
        return "ran"
    """)
    assert seen["result"] == "ran" and seen["findings"] == [], seen


RAISES_IN_CPP = 'tvm_ffi.get_global_func("testing.test_raise_error")("ValueError", "from C++")'
"""A tvm-ffi function (TileLang's runtime) that raises in C++: tvm-ffi makes a Python frame for each line of the C++
backtrace by evaluating a bare `_getframe()` under that line's file name (`tvm_ffi.error.TracebackManager`)."""


def test_frames_a_library_makes_for_a_cpp_backtrace_are_not_findings(tmp_path: Path) -> None:
    """An honest candidate's TileLang kernel that raises: the frames tvm-ffi makes for the exception's traceback
    are its own (they were `sys._getframe ... from testing.cc`, and the candidate tamper_detected)."""
    seen = probe(tmp_path, f"""
        import tvm_ffi
        try:
            {RAISES_IN_CPP}
        except ValueError as exc:
            lines = traceback.format_exception(exc)
            return "raised, traceback through " + ("testing.cc" if "testing.cc" in "".join(lines) else "?")
    """)
    assert seen["result"] == "raised, traceback through testing.cc", seen
    assert seen["findings"] == [], seen


@pytest.mark.parametrize(("making", "where"), [
    # the library's frame maker called by the candidate: its caller is who asked
    ('tvm_ffi.error._TRACEBACK_MANAGER._create_frame("testing.cc", 1, "f")', r"candidate\.py:\d+"),
    # the same stub evaluated by the candidate itself, under the same file name: the stub's frame asked
    ('eval(compile("_getframe()", "testing.cc", "eval"), {"_getframe": sys._getframe})', r"testing\.cc:1"),
    # the library's maker fed the candidate's code (an instance attribute: no audit event), then an honest raise:
    # the candidate's code asked
    ("setattr(tvm_ffi.error._TRACEBACK_MANAGER, '_get_cached_code_object',\n"
     "        lambda *key: compile('_getframe().f_back', 'testing.cc', 'eval'))\n"
     f"try:\n    {RAISES_IN_CPP}\nexcept ValueError:\n    pass", r"testing\.cc:1"),
], ids=["maker called", "stub evaluated", "maker fed other code"])
def test_a_frame_made_by_or_through_a_library_for_the_candidate_is_recorded(tmp_path: Path, making: str,
                                                                           where: str) -> None:
    seen = probe(tmp_path, "import tvm_ffi\n" + making + "\nreturn 'took it'")
    assert seen["result"] == "took it", seen
    assert len(seen["findings"]) == 1, seen
    assert re.fullmatch(rf"sys\._getframe .* from {where}", seen["findings"][0]), seen


def test_other_audit_hooks_tracers_and_the_c_api_are_refused(tmp_path: Path) -> None:
    seen = probe(tmp_path, """
        ran = []
        sys.addaudithook(lambda event, args: ran.append(event))
        sys.audit("c12.ping")
        refused = []
        for attempt in (lambda: sys.settrace(lambda *a: None), lambda: sys.setprofile(lambda *a: None),
                        lambda: ctypes.pythonapi.PyFrame_LocalsToFast):
            try:
                attempt()
            except RuntimeError:
                refused.append(True)
        return {"hook ran": ran, "refused": len(refused)}
    """)
    assert seen["result"] == {"hook ran": [], "refused": 3}, seen
    assert [f.split(" ")[0] for f in seen["findings"]] == ["sys.addaudithook", "sys.settrace", "sys.setprofile",
                                                         "ctypes"], seen
    assert seen["hooks"] == [], "nothing refused was installed"


def test_the_harness_instances_sealed_in_the_hook_report_every_edit(tmp_path: Path) -> None:
    """Reached through a frame, the clock's overhead replaced, a method hidden by an instance attribute, a sealed
    attribute replaced; an attribute the harness did not seal as stable is the harness's own business."""
    seen = probe(tmp_path, """
        harness.clock.host_overhead_ms = 1e9
        harness.clock.flush = lambda: None
        harness.step = lambda: "the candidate's"
        harness.level = 2
        harness.scratch = 1
        harness.tripwires.hits.clear()
        return "edited"
    """)
    assert set(seen["findings"]) == {"the timing clock.host_overhead_ms", "the timing clock.flush (added)",
                                     "the harness.step (an instance attribute hides the class's)",
                                     "the harness.level"}, seen


def test_a_harness_instance_with_its_dict_or_class_replaced_is_reported(tmp_path: Path) -> None:
    seen = probe(tmp_path, """
        harness.clock.__dict__ = dict(vars(harness.clock))
        harness.__class__ = type("Other", (), {})
        sys.audit("judge.seal", "the harness", harness, None)
        return "swapped"
    """)
    assert set(seen["findings"]) == {"the timing clock (its attribute dict was replaced)",
                                     "the harness (its class was replaced)", "the harness was sealed twice"}, seen


def test_a_hook_that_no_longer_answers_is_itself_a_finding(tmp_path: Path) -> None:
    seen = probe(tmp_path, """
        sys.modules["sandbox.child.audit"]._audit = lambda *args: None
        return "silenced"
    """)
    assert seen["findings"] == ["the judge's audit hook did not answer (removed from the interpreter, or sys.audit "
                                "replaced)"], seen


def test_a_forbidden_call_stays_recorded_when_the_tripwires_list_is_cleared(tmp_path: Path) -> None:
    seen = probe(tmp_path, """
        try:
            torch.nn.functional.kl_div(torch.rand(4).log(), torch.rand(4), reduction="batchmean")
        except RuntimeError:
            pass
        harness.tripwires.hits.clear()
        return len(harness.tripwires.hits)
    """)
    assert seen["result"] == 0 and seen["hits"] == ["aten::kl_div"], seen


def test_hooks_that_raise_no_audit_event_are_found_in_their_registries(tmp_path: Path) -> None:
    seen = probe(tmp_path, """
        gate = threading.Event()
        threading.Thread(target=gate.wait, daemon=True).start()
        gc.callbacks.append(lambda phase, info: None)
        signal.signal(signal.SIGUSR1, lambda signum, frame: None)
        signal.setitimer(signal.ITIMER_VIRTUAL, 100.0)
        threading.settrace(lambda *args: None)
        sys.unraisablehook = lambda info: None
        torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t).__enter__()
        return "installed"
    """)
    hooks = " | ".join(seen["hooks"])
    for name in ("gc.callbacks", "ITIMER_VIRTUAL", "signal handler for SIGUSR1", "threading.settrace",
                 "sys.unraisablehook", "saved_tensors_hooks"):
        assert name in hooks, seen["hooks"]
    quick = " | ".join(seen["quick"])
    assert "gc.callbacks" in quick and "ITIMER_VIRTUAL" in quick and "Python thread" in quick, seen["quick"]
    assert "SIGUSR1" not in quick, "the quick check, at a batch's end, leaves the handlers to the replies"


# --- the timing loop ------------------------------------------------------------------------------------

def test_an_edit_of_the_clock_during_a_batch_changes_nothing_it_measures_and_is_reported() -> None:
    """The clock is read once, before the first call: a flush replaced during call 0 is not the one call 1 gets."""
    clock = DeviceClock(torch.device("cpu"))
    skipped: list[int] = []

    def edit() -> None:
        clock.flush = lambda: skipped.append(1)
        clock.host_overhead_ms = 1e9

    batch = time_cpu_batch(clock, [edit, lambda: None])
    assert skipped == [], "call 1 was flushed by the clock as it was when the batch began"
    assert batch.tampered == ("the timing clock (an attribute of its instance changed during the batch)",)
    clean = time_cpu_batch(DeviceClock(torch.device("cpu")), [lambda: None, lambda: None])
    assert clean.tampered == ()


def test_the_clock_s_flush_buffer_shrunk_in_place_is_reported() -> None:
    clock = DeviceClock(torch.device("cpu"))
    clock._flush.resize_(1)
    assert "the timing clock's flush buffer (replaced or resized)" in time_cpu_batch(clock, [lambda: None]).tampered


def _gpu_stand_ins(monkeypatch) -> DeviceClock:
    """No GPU here: events stamp a counter, so an event recorded again later reads later (elapsed in 'ms')."""
    ticks = iter(range(10**6))

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.at = -1

    def record(event: Event) -> None:
        event.at = next(ticks)

    monkeypatch.setattr(timing, "_Event", Event)
    monkeypatch.setattr(timing, "_record", record)
    monkeypatch.setattr(timing, "_elapsed_time", lambda start, end: float(end.at - start.at))
    monkeypatch.setattr(timing, "_cuda_synchronize", lambda device: None)
    clock = DeviceClock(torch.device("cpu"))
    clock.is_cuda = True
    return clock


def test_the_timing_loop_s_events_cannot_be_replaced_and_recording_them_again_is_reported(monkeypatch) -> None:
    """From a frame the candidate walked to: the event pairs are a tuple, and an event recorded again (a start
    moved to just before a pad) reads out of order."""
    clock = _gpu_stand_ins(monkeypatch)
    tried: list[str] = []

    def edit_the_loop() -> None:
        frame = sys._getframe(1)
        while "events" not in frame.f_locals:  # up past the call's wrapper, to the timing loop
            frame = frame.f_back
        events = frame.f_locals["events"]
        try:
            events[0] = events[1]
        except TypeError:
            tried.append("a tuple")
        timing._record(events[0][0])  # call 0's start, stamped again during call 1: just before a pad

    batch = timing.time_cuda_batch(clock, [lambda: None, edit_the_loop])
    assert tried == ["a tuple"]
    assert batch.tampered == ("the batch's timing events (recorded again, out of order, during the batch)",)
    assert timing.time_cuda_batch(clock, [lambda: None, lambda: None]).tampered == ()


# --- the window -----------------------------------------------------------------------------------------

def test_outputs_are_kept_inside_the_window_and_a_change_after_it_is_reported() -> None:
    clock = DeviceClock(torch.device("cpu"))
    outs = [torch.full((), 2.5), torch.full((), 1.5)]
    keeper = Keeper(torch.device("cpu"), (), torch.float32, 2)
    batch = time_cpu_batch(clock, [lambda: outs[0], lambda: outs[1]], keep=keeper)
    assert [torch.frombuffer(bytearray(k.output), dtype=torch.float32).item() for k in batch.kept] == [2.5, 1.5]
    assert changed_after(batch.results, batch.kept) == []
    outs[1].fill_(7.0)  # finished after the last call returned: what was reported is what was kept
    assert torch.frombuffer(bytearray(batch.kept[1].output), dtype=torch.float32).item() == 1.5
    assert [m.split(":")[0] for m in changed_after(batch.results, batch.kept)] == ["timed call 1 of the batch"]


def test_an_output_that_is_not_the_task_s_plain_tensor_is_not_kept() -> None:
    keeper = Keeper(torch.device("cpu"), (), torch.float32, 3)
    for i, out in enumerate([torch.zeros(2), torch.zeros((), dtype=torch.float64), "not a tensor"]):
        keeper.take(i, out)
    assert [k.output for k in keeper.close()] == [None, None, None]


def test_a_step_s_gradient_rows_are_kept_and_a_gradient_finished_later_is_reported() -> None:
    leaves = [torch.rand(128, 16) for _ in range(2)]
    for leaf in leaves:
        leaf.grad = torch.rand(128, 16)
    keeper = Keeper(torch.device("cpu"), (), torch.float32, 2, (0, (128, 16), torch.float32))
    for i in range(2):
        keeper.take(i, torch.zeros(()), [leaves[i]])
    kept = keeper.close()
    assert all(len(k.rows) == 64 and len(k.row_digests) == 64 * 8 for k in kept)
    assert gradient_changed_after(leaves[0].grad, kept[0], 0) is None
    leaves[1].grad.mul_(3.0)
    assert "the gradient of step 1 changed" in gradient_changed_after(leaves[1].grad, kept[1], 1)


# --- real children -------------------------------------------------------------------------------------

FORWARD = """
import torch

class ModelNew(torch.nn.Module):
    def forward(self, p, t):
        return (t * (torch.log(t) - torch.log(p))).sum() / p.shape[0]
"""

STEP = """
import torch

class KL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p, t):
        ctx.save_for_backward(p, t)
        return (t * (torch.log(t) - torch.log(p))).sum() / p.shape[0]

    @staticmethod
    def backward(ctx, g):
        p, t = ctx.saved_tensors
        return -(t / p) / p.shape[0] * g, None

class ModelNew(torch.nn.Module):
    def forward(self, p, t):
        return KL.apply(p, t)
"""


@pytest.mark.parametrize("mode, source, what", [("forward", FORWARD, "timed call 0 of the batch: its output changed"),
                                                ("step", STEP, "the gradient of step 0 changed")])
def test_a_child_reports_results_finished_after_the_batch_s_last_event(tmp_path: Path, mode: str, source: str,
                                                                       what: str) -> None:
    path = tmp_path / "candidate.py"
    path.write_text(source)
    late = _run("drive_late_work.py", mode, str(path), "late")["findings"]
    assert len(late) == 1 and late[0].startswith(what), late
    assert _run("drive_late_work.py", mode, str(path), "untouched")["findings"] == []


KERNEL = '''
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="{name}", cpp_sources=r"""
double kl_sum(torch::Tensor p, torch::Tensor t) {{
    auto pc = p.contiguous(), tc = t.contiguous();
    const float *pp = pc.data_ptr<float>(), *tp = tc.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < pc.numel(); ++i)
        if (tp[i] > 0.f) total += (double)tp[i] * (std::log((double)tp[i]) - std::log((double)pp[i]));
    return total;
}}
""", functions=["kl_sum"], verbose=False)
'''

DEFERRED = '''"""Half the work after the window: computes honestly while the judge's profiler watches (trials) and in
the estimate's four calls; in a timed call it sums the first half of the rows and leaves the second half to a kernel
it registers on aten::clone and aten::zeros, the harness's next allocations, and unregisters once it has run.
Before the window's copies the harness cloned each output after the batch: the work ran there, unclocked, and
the answer was right. Now the output is copied inside the window, and the harness next allocates in `inspect`."""
import sys

import torch
''' + KERNEL.format(name="kl_half_deferred") + '''
_pending, _calls, _library = [], [0], []


def _finish():
    for p, t, out, rows in _pending:
        out.add_(ext.kl_sum(p, t) / rows)
    _pending.clear()
    if _library:
        _library.pop()._destroy()  # gone before the judge looks at the dispatcher again


def _zeros(size, dtype=None, layout=None, device=None, pin_memory=None):
    _finish()
    return torch.empty(size, dtype=dtype, layout=layout, device=device).zero_()


def _clone(self, memory_format=None):
    _finish()
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.aten.clone.default(self, memory_format=memory_format)


class ModelNew(torch.nn.Module):
    def forward(self, p, t):
        rows, half = p.shape[0], p.shape[0] // 2
        _calls[0] += sys.getprofile() is None
        if sys.getprofile() is not None or _calls[0] <= 4:
            return torch.full((), ext.kl_sum(p, t) / rows)
        out = torch.full((), ext.kl_sum(p[:half], t[:half]) / rows)
        _pending.append((p[half:], t[half:], out, rows))
        if not _library:
            _library.append(torch.library.Library("aten", "IMPL"))
            _library[0].impl("zeros", _zeros, "CompositeExplicitAutograd")
            _library[0].impl("clone", _clone, "AutogradCPU")
        return out
'''

HONEST_AND_CHATTY = '''"""Honest, and noisy: warnings at several stack levels, a torch deprecation, a log record and a
formatted traceback in every call (each takes a frame inside the library, on the candidate's behalf)."""
import logging
import traceback
import warnings

import torch
''' + KERNEL.format(name="kl_chatty") + '''

class ModelNew(torch.nn.Module):
    def forward(self, p, t):
        for level in (2, 3, 4):
            warnings.warn("a candidate's own warning", stacklevel=level)
        p.storage()  # torch's TypedStorage deprecation
        logging.getLogger("candidate").info("forward")
        try:
            raise ValueError("handled")
        except ValueError:
            traceback.format_exc()
        return torch.full((), ext.kl_sum(p, t) / p.shape[0])
'''


def test_work_deferred_to_the_harness_s_next_allocation_is_tamper(judge_config) -> None:
    verdict = judge("kl_div", DEFERRED, "cpu", config=judge_config)
    assert verdict.status is Status.TAMPER_DETECTED, verdict.diagnosis
    assert "its output changed after the batch's last event" in verdict.diagnosis, verdict.diagnosis


def test_an_honest_candidate_that_warns_logs_and_formats_tracebacks_is_correct(judge_config) -> None:
    verdict = judge("kl_div", HONEST_AND_CHATTY, "cpu", config=judge_config)
    assert verdict.status is Status.CORRECT, verdict.diagnosis
