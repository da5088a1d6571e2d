"""Entry point of the isolated child: `python -m sandbox.child MODE ...`, as sandbox/supervisor.py starts it.

Only this module runs as `__main__`, and nothing imports it: the harness (harness.py) and its training variant
(training.py) are ordinary modules, imported once before the candidate, so the classes and functions Integrity
watches are the ones that serve this process (a harness run as `__main__` and imported again would be two copies).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import torch

from reference import get_task
from sandbox import protocol
from sandbox.child.build.compile import compile_only
from sandbox.child.harness import Child, serve
from sandbox.child.training import TrainingChild


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.child")
    parser.add_argument("mode", choices=["compile", "execute"])
    parser.add_argument("--task", default="")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--pre-started", action="store_true",
                        help="say `started`, then wait for `begin` (which names the task) before touching the device")
    parser.add_argument("--context-at-start", action="store_true",
                        help="a spare: create the device context before saying `started` (sandbox/execution/warm.py)")
    parser.add_argument("--source", required=True)
    parser.add_argument("--cmd-fd", type=int, required=True)
    parser.add_argument("--res-fd", type=int, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("JUDGE_CHILD_THREADS", "1")))
    if args.mode == "compile":
        compile_only(get_task(args.task).id, args.source, args.res_fd)
        return
    # The first operator the harness probe runs under a TorchFunctionMode imports torch._dynamo (~1.5 s of CPU):
    # imported here, a spare pays it in its CPU-only start instead of inside the device gate. So is torch's
    # extension builder, which the child's build guard replaces a function of (sandbox/child/no_build.py).
    importlib.import_module("torch._dynamo")
    importlib.import_module("torch.utils.cpp_extension")

    task_id = args.task
    if args.pre_started:
        # A spare (sandbox/execution/warm.py): everything above is CPU work. The device is first touched below, once the
        # judge says no candidate is being timed on it; the candidate's files arrive later still, before `load`.
        # With --context-at-start the context is created here, outside that wait, by an allocation alone: no
        # kernel of ours runs before `Begin` (JudgeConfig.spare_context_at_start: what it does beside a timed
        # kernel was measured).
        if args.context_at_start and torch.device(args.device).type == "cuda":
            torch.cuda.set_device(args.device)
            torch.empty(1, device=args.device)
        protocol.send(args.res_fd, protocol.Started.success())
        begin = protocol.parse_command(protocol.receive(args.cmd_fd)[0])
        if not isinstance(begin, protocol.Begin):
            return  # `exit` (the spare was retired), or anything else: nothing to serve
        task_id = begin.task
    task = get_task(task_id)  # the id as the command line or `Begin` has it
    child_cls: type[Child] = TrainingChild if task.training is not None else Child
    child = child_cls(task.id, args.device, args.source, args.res_fd)
    protocol.send(args.res_fd, protocol.Ready.success(setup_s=child.setup_s, trace=child.trace_probe))
    serve(child, args.cmd_fd)


def exit_now() -> None:
    """End the process without the interpreter's finalisation: tearing down torch and the device context from
    Python took ~1 s of device time after every candidate. Nothing in the child needs an orderly end (its
    files are the judge's to remove; the kernel frees the device context when the process exits). The streams
    are unbuffered (PYTHONUNBUFFERED), but a candidate may have replaced them: they are flushed."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a candidate may have replaced or closed the stream
            pass
    os._exit(0)


if __name__ == "__main__":  # run by `python -m sandbox.child`, never on import
    main()
    exit_now()
