"""`import-kernelbench` and `export-kernelbench`: KernelBench run directories as batches, and back."""

from pathlib import Path
from typing import Annotated

import typer

from service.cli.batches import watch_batch
from service.cli.exitcodes import ExitCode
from service.cli.options import URL_DEFAULT, Json, Key, Url, client, err, print_json
from service.interop import kernelbench


def import_kernelbench(run_dir: Annotated[Path, typer.Argument(help="A KernelBench run directory (runs/<name>).",
                                                               exists=True, file_okay=False)],
                       model: Annotated[str | None, typer.Option(
                           help="Model name (default: generation_config.yaml's model_name).")] = None,
                       name: Annotated[str | None, typer.Option(help="Batch name (default: the run's name).")] = None,
                       watch: Annotated[bool, typer.Option("--watch", help="Follow the batch until done.")] = False,
                       url: Url = URL_DEFAULT, key: Key = None, as_json: Json = False) -> None:
    """Submit a KernelBench run's kernel files (level 1 problems 95 and 98) as one batch; prints its id."""
    with client(url, key) as judge:
        samples, skipped = kernelbench.import_run(run_dir, judge.tasks(), model)
        for kernel in skipped:
            err.print(f"skipped {kernel.path.name}: no task for level {kernel.level} problem {kernel.problem_id}",
                      highlight=False)
        if not samples:
            err.print(f"[red]error:[/] no kernel files of known tasks in {run_dir}")
            raise typer.Exit(ExitCode.LOCAL_ERROR)
        accepted = judge.create_batch(samples, name=name or f"kernelbench/{run_dir.name}")
        err.print(f"imported {len(samples)} kernels as batch {accepted.id}", highlight=False)
        print_json(accepted) if as_json else typer.echo(accepted.id)
        if watch:
            watch_batch(judge, accepted.id)


def export_kernelbench(batch_id: Annotated[str, typer.Argument(metavar="BATCH_ID", help="The batch id.")],
                       out_dir: Annotated[Path, typer.Argument(metavar="DIR",
                                                               help="Where to write eval_results.json.")],
                       url: Url = URL_DEFAULT, key: Key = None, as_json: Json = False) -> None:
    """Write a batch's verdicts as KernelBench's eval_results.json (and baseline timing files) into DIR."""
    with client(url, key) as judge:
        rows = list(judge.results(batch_id))
        verdicts = {}
        for row in rows:
            judged = kernelbench.judged_id(row)
            if row.correct and judged and judged not in verdicts:  # timings live in the full verdict
                verdicts[judged] = judge.submission(judged).verdict
        eval_results, baselines = kernelbench.build_export(rows, verdicts, judge.tasks())
    written = kernelbench.write_export(out_dir, eval_results, baselines)
    if as_json:
        print_json({"written": [str(p) for p in written], "problems": {k: len(v) for k, v in eval_results.items()}})
    else:
        for path in written:
            typer.echo(str(path))
