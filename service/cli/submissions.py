"""Client commands about single candidates and tasks: submit, status, tasks, prompt, leaderboard."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from service.cli import render
from service.cli.exitcodes import ExitCode
from service.cli.options import (
    URL_DEFAULT,
    Json,
    Key,
    Url,
    client,
    err,
    out,
    print_json,
)
from service.client import NotFound


def submit(file: Annotated[Path, typer.Argument(help="The candidate (a module or a raw completion); - for stdin.",
                                                allow_dash=True)],
           task: Annotated[str, typer.Option(help="Task id, e.g. kl_div (see `kernel-judge tasks`).")],
           model: Annotated[str | None, typer.Option(help="Name of the model that wrote it.")] = None,
           tag: Annotated[list[str] | None, typer.Option(help="A free-form label (repeatable).")] = None,
           idempotency_key: Annotated[str | None, typer.Option(help="Resubmitting with it returns the first.")] = None,
           public: Annotated[bool, typer.Option("--public", help="Let anyone read its source (private by default; "
                                                "PATCH /v1/submissions/ID can change it later).")] = False,
           profile: Annotated[bool, typer.Option("--profile", help="Also profile its kernels with Nsight Compute "
                                                 "after the verdict (GPU workers): kernel-judge profile ID.")] = False,
           wait: Annotated[bool, typer.Option("--wait", help="Follow it until judged; exit 1 unless correct.")] = False,
           timeout: Annotated[float | None, typer.Option(help="With --wait: give up after this many seconds.")] = None,
           url: Url = URL_DEFAULT, key: Key = None, as_json: Json = False) -> None:
    """Submit one candidate; prints its id (and with --wait the line `status: diagnosis`)."""
    text = sys.stdin.read() if str(file) == "-" else _read(file)
    with client(url, key) as judge:
        fields = {name: True for name, asked in (("public", public), ("profile", profile)) if asked}
        accepted = judge.submit(task, text, model=model, tags=tag or [], idempotency_key=idempotency_key, **fields)
        if not wait:
            print_json(accepted) if as_json else typer.echo(accepted.id)
            return
        if not as_json:
            typer.echo(accepted.id)
        waiting = render.WaitProgress()
        with err.status(waiting):
            view = judge.wait(accepted.id, timeout=timeout, on_update=lambda v: err.print(waiting.update(v),
                                                                                          highlight=False))
    print_json(view) if as_json else typer.echo(render.verdict_line(view.verdict))
    if view.verdict is None or not view.verdict.correct:
        raise typer.Exit(ExitCode.NOT_CORRECT)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        err.print(f"[red]error:[/] cannot read {path}: {exc}")
        raise typer.Exit(ExitCode.LOCAL_ERROR) from None


def status(ident: Annotated[str, typer.Argument(metavar="ID", help="A submission id or a batch id.")],
           url: Url = URL_DEFAULT, key: Key = None, as_json: Json = False) -> None:
    """Show a submission (stage, verdict, timings) or a batch (counts, progress)."""
    with client(url, key) as judge:
        try:
            sub = judge.submission(ident)
        except NotFound:
            batch = judge.batch(ident)  # NotFound here too: exit 5 with the server's message
            print_json(batch) if as_json else out.print(render.batch_table(batch))
            return
    print_json(sub) if as_json else out.print(render.submission_table(sub))


def profile(ident: Annotated[str, typer.Argument(metavar="ID", help="A submission sent with --profile.")],
            wait: Annotated[bool, typer.Option("--wait", help="Wait while the profile is pending.")] = False,
            timeout: Annotated[float | None, typer.Option(help="With --wait: give up after this many seconds.")] = None,
            text: Annotated[bool, typer.Option("--text", help="Print the plain text a model is given instead "
                                               "of the table.")] = False,
            url: Url = URL_DEFAULT, key: Key = None, as_json: Json = False) -> None:
    """Show a submission's Nsight Compute profile: per kernel, time, DRAM and SM throughput, occupancy,
    registers, shared memory, grid and block, top warp stalls. Exit 5 when none was asked for."""
    with client(url, key) as judge:
        found = judge.wait_profile(ident, timeout=timeout) if wait else judge.profile(ident)
    if as_json:
        print_json(found)
    elif text:
        typer.echo(found.text or f"profile {found.status}")
    else:
        out.print(render.profile_table(found))


def tasks(url: Url = URL_DEFAULT, key: Key = None, as_json: Json = False) -> None:
    """List the tasks the judge knows."""
    with client(url, key) as judge:
        found = judge.tasks()
    print_json(found) if as_json else out.print(render.tasks_table(found))


def prompt(task: Annotated[str, typer.Argument(help="Task id.")],
           language: Annotated[str, typer.Option(
               help="The kernel language: cuda, triton, cute or tilelang (GPU), or cpp (C++ for the CPU).")] = "cuda",
           url: Url = URL_DEFAULT, key: Key = None, as_json: Json = False) -> None:
    """Print the KernelBench-style generation prompt of a task (what an LLM is shown), for one kernel language."""
    with client(url, key) as judge:
        text = judge.prompt(task, language)
    print_json({"task": task, "language": language, "prompt": text}) if as_json else typer.echo(text)


def leaderboard(task: Annotated[str, typer.Argument(help="Task id.")],
                by: Annotated[str, typer.Option(help="One entry per submitter or per model.")] = "submitter",
                sort: Annotated[str, typer.Option(
                    help="speedup_eager, speedup_compile, speed_of_light or median_ms.")] = "speedup_eager",
                device: Annotated[str | None, typer.Option(help="Only this device model.")] = None,
                limit: Annotated[int, typer.Option(help="Entries per device.")] = 20,
                url: Url = URL_DEFAULT, key: Key = None, as_json: Json = False) -> None:
    """Show the best correct submissions of a task, per GPU model."""
    with client(url, key) as judge:
        board = judge.leaderboard(task, by=by, sort=sort, device=device, limit=limit)
    print_json(board) if as_json else out.print(render.leaderboard_table(board))
