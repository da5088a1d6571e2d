"""`kernel-judge generate`: sample kernels from an OpenAI-compatible model, judge them, refine the failures."""

from typing import Annotated

import typer
from rich.table import Table

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
from service.generation import (
    ChatClient,
    ChatError,
    GenerationConfig,
    TurnSummary,
    run_generation,
)


def generate(task: Annotated[str, typer.Option(help="Task id, e.g. kl_div.")],
             model: Annotated[str, typer.Option(envvar="JUDGE_GEN_MODEL", help="Model name sent to the endpoint.")],
             language: Annotated[str, typer.Option(
                 help="The prompt's kernel language: cuda, triton, cute or tilelang (GPU), or cpp (C++ for the "
                      "CPU).")] = "cuda",
             samples: Annotated[int, typer.Option(min=1, help="Samples (conversations) to draw.")] = 1,
             turns: Annotated[int, typer.Option(min=0, help="Refinement turns after the first.")] = 0,
             base_url: Annotated[str, typer.Option(envvar="OPENAI_BASE_URL",
                                                   help="Chat-completions base URL, e.g. "
                                                        "http://127.0.0.1:8100/v1 (`fake-model`'s)."
                                                   )] = "https://api.openai.com/v1",
             api_key: Annotated[str | None, typer.Option(envvar="OPENAI_API_KEY", show_default=False,
                                                         help="Key for the model endpoint.")] = None,
             temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
             max_tokens: Annotated[int | None, typer.Option(help="Longest answer in tokens.")] = None,
             top_p: Annotated[float | None, typer.Option(help="Nucleus sampling.")] = None,
             name: Annotated[str | None, typer.Option(help="Batch name prefix (turn t is <name>/turn-t).")] = None,
             concurrency: Annotated[int, typer.Option(min=1, help="Model requests in flight.")] = 8,
             poll: Annotated[float, typer.Option(help="Seconds between batch polls.")] = 1.0,
             profile: Annotated[bool, typer.Option("--profile", help=(
                 "Profile every sample with Nsight Compute (GPU workers) and give the model its profile in the "
                 "next turn; correct kernels then get a turn too, asked to be made faster."))] = False,
             url: Url = URL_DEFAULT, key: Key = None, as_json: Json = False) -> None:
    """Prompt a model with the task, judge its samples as a batch, and feed each failure's diagnosis back
    for up to --turns refinement turns. Every turn is stored, linked to the turn it refines."""
    config = GenerationConfig(task=task, model=model, language=language, samples=samples, turns=turns,
                              temperature=temperature, max_tokens=max_tokens, top_p=top_p, name=name,
                              concurrency=concurrency, poll_s=poll, profile=profile)
    chat = ChatClient(base_url=base_url, api_key=api_key)

    def on_turn(summary: TurnSummary) -> None:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(summary.verdicts.items()))
        err.print(f"turn {summary.turn}: {summary.samples} samples in batch {summary.batch_id}: {counts}; "
                  f"solved {summary.solved_total}/{samples}", highlight=False)

    try:
        with client(url, key) as judge:
            report = run_generation(config, judge, chat, on_turn=on_turn)
    except ChatError as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(ExitCode.LOCAL_ERROR) from None
    finally:
        chat.close()
    if as_json:
        print_json({"task": task, "model": model, "solved": report.solved, "samples": samples,
                    "turns": [vars(t) for t in report.turns],
                    "conversations": [{"index": c.index, "submission_ids": c.submission_ids, "statuses": c.statuses,
                                       "error": c.error} for c in report.conversations]})
        return
    table = Table(title=f"generate {task} with {model}: {report.solved}/{samples} solved")
    for column in ("turn", "batch", "samples", "verdicts", "solved so far"):
        table.add_column(column)
    for t in report.turns:
        verdicts = ", ".join(f"[{render.STATUS_STYLE.get(k, '')}]{k} {v}[/]" for k, v in sorted(t.verdicts.items()))
        table.add_row(str(t.turn), t.batch_id or "-", str(t.samples), verdicts, f"{t.solved_total}/{samples}")
    out.print(table)
