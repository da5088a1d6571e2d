"""Client commands about batches: batch (upload, --watch), results, cancel."""

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from service.batches.lines import split_lines
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
from service.client import InvalidRequest, JudgeClient, NotFound, models


def batch(file: Annotated[Path, typer.Argument(help="JSONL: one sample a line (task, source|completion, model, "
                                                    "sample_index, sampling, metadata, parent_id, turn).")],
          name: Annotated[str | None, typer.Option(help="A name for the batch.")] = None,
          watch: Annotated[bool, typer.Option("--watch", help="Show live progress, then the summary table.")] = False,
          timeout: Annotated[float | None, typer.Option(help="With --watch: stop watching after this long.")] = None,
          poll: Annotated[float, typer.Option(help="With --watch: seconds between polls.")] = 1.0,
          url: Url = URL_DEFAULT, key: Key = None, as_json: Json = False) -> None:
    """Upload a batch of samples; prints its id. Malformed lines are reported by line number, the rest judged."""
    try:
        # bytes, not read_text: its universal newlines would also break at a lone \r and renumber the lines
        lines = split_lines(file.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        err.print(f"[red]error:[/] cannot read {file}: {exc}")
        raise typer.Exit(ExitCode.LOCAL_ERROR) from None
    with client(url, key) as judge:
        try:
            accepted = judge.create_batch(lines, name=name)
        except InvalidRequest as exc:
            _show_rejected(_rejected_of(exc.body))
            raise
        if not as_json:
            typer.echo(accepted.id)
        _show_rejected(accepted.rejected)
        err.print(f"accepted {accepted.accepted} samples ({accepted.duplicates} duplicates share a verdict), "
                  f"rejected {len(accepted.rejected)} lines", highlight=False)
        if not watch:
            if as_json:
                print_json(accepted)
            return
        final = watch_batch(judge, accepted.id, poll_s=poll, timeout=timeout)
        metrics = _metrics(judge, final.id)
    if as_json:
        print_json({"accepted": accepted.model_dump(mode="json"), "batch": final.model_dump(mode="json"),
                    "metrics": metrics.model_dump(mode="json") if metrics else None})
    else:
        out.print(render.summary(final, metrics))


def watch_batch(judge: JudgeClient, batch_id: str, *, poll_s: float = 1.0, timeout: float | None = None
                ) -> models.Batch:
    """A live progress bar on stderr (counts by stage and verdict) until the batch is finished."""
    progress = render.batch_progress(err)
    with progress:
        bar = progress.add_task("judging", total=None, eta="", counts="")

        def update(view: models.Batch) -> None:
            progress.update(bar, total=view.total, completed=round(view.progress * view.total),
                            eta=render.eta_text(view), counts=render.counts_text(view),
                            description="judged" if view.finished else "judging")

        return judge.wait_batch(batch_id, poll_s=poll_s, timeout=timeout, on_update=update)


def _metrics(judge: JudgeClient, batch_id: str) -> models.BatchMetrics | None:
    try:
        return judge.batch_metrics(batch_id)
    except NotFound:
        return None  # a server without the metrics route: the verdict table is still worth showing


def _rejected_of(body: object) -> list[models.RejectedLine]:
    found = body.get("rejected") if isinstance(body, dict) else None
    if found is None and isinstance(body, dict) and isinstance(body.get("detail"), dict):
        found = body["detail"].get("rejected")
    return [models.RejectedLine.model_validate(r) for r in found or []]


def _show_rejected(rejected: list[models.RejectedLine], limit: int = 20) -> None:
    for r in rejected[:limit]:
        err.print(f"[yellow]line {r.line}:[/] {r.error}", highlight=False)
    if len(rejected) > limit:
        err.print(f"... and {len(rejected) - limit} more rejected lines")


def results(batch_id: Annotated[str, typer.Argument(metavar="ID", help="The batch id.")],
            output: Annotated[Path | None, typer.Option("-o", "--output",
                                                         help="Write to this file (.csv or .jsonl).")] = None,
            fmt: Annotated[str | None, typer.Option("--format", help="csv or jsonl (default: from -o, else jsonl).")
                           ] = None,
            url: Url = URL_DEFAULT, key: Key = None) -> None:
    """Download a batch's results, one row per uploaded line (streamed)."""
    fmt = fmt or ("csv" if output is not None and output.suffix == ".csv" else "jsonl")
    if fmt not in ("csv", "jsonl"):
        err.print(f"[red]error:[/] --format must be csv or jsonl, not {fmt!r}")
        raise typer.Exit(ExitCode.USAGE)
    with client(url, key) as judge:
        if output is not None:
            size = judge.download_results(batch_id, output, fmt)
            err.print(f"wrote {size} bytes to {output}", highlight=False)
        elif fmt == "jsonl":
            for row in judge.results(batch_id):
                typer.echo(json.dumps(row.model_dump(mode="json")))
        else:
            judge.download_results(batch_id, sys.stdout.buffer, fmt)
            sys.stdout.flush()


def cancel(batch_id: Annotated[str, typer.Argument(metavar="ID", help="The batch id.")],
           url: Url = URL_DEFAULT, key: Key = None, as_json: Json = False) -> None:
    """Cancel a batch: samples not yet started are dropped; verdicts already given stay."""
    with client(url, key) as judge:
        view = judge.cancel_batch(batch_id)
    print_json(view) if as_json else out.print(render.batch_table(view))
