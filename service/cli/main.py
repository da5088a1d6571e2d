"""`kernel-judge`: run the judge (serve, worker, migrate, keys) and use it (submit, batch, generate, ...).

    kernel-judge serve                          API + one local worker, SQLite in ~/.local/share/kernel-judge
    kernel-judge worker                         a standalone worker for DATABASE_URL (any machine, any GPUs)
    kernel-judge submit kernel.py --task kl_div --wait
    kernel-judge profile ID                     its Nsight Compute profile, when sent with --profile
    kernel-judge batch examples/samples.jsonl --watch    a live progress bar, then the metrics table
    kernel-judge generate --task kl_div --model M --samples 8 --turns 2
    kernel-judge fake-model --port 8100         a stand-in model server for generate (no LLM needed)

The client commands read JUDGE_URL (default http://127.0.0.1:8000) and JUDGE_API_KEY, or --url/--key.
`python -m service.cli.main ...` is the same program.
"""

import sys

import typer

from service.cli import batches, exitcodes, interop, judging, ops, submissions
from service.cli import generate as generate_cmd
from service.cli.fake_model import fake_model
from service.cli.options import err
from service.client import JudgeError

app = typer.Typer(
    name="kernel-judge",
    help="Judge LLM-written GPU kernels: run the service, submit candidates and batches, generate and refine.",
    epilog=exitcodes.help_text(),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

SERVICE = "Run the service"
CLIENT = "Use the service"
RESEARCH = "Generate, batch and interoperate"

app.command(rich_help_panel=SERVICE)(ops.serve)
app.command(rich_help_panel=SERVICE)(ops.worker)
app.command(rich_help_panel=SERVICE)(ops.migrate)
app.command(rich_help_panel=SERVICE)(ops.maintain)
app.add_typer(ops.keys, name="keys", rich_help_panel=SERVICE)

app.command(rich_help_panel=CLIENT)(submissions.submit)
app.command(rich_help_panel=CLIENT)(submissions.status)
app.command(rich_help_panel=CLIENT)(submissions.profile)
app.command(rich_help_panel=CLIENT)(submissions.tasks)
app.command(rich_help_panel=CLIENT)(judging.judging)
app.command(rich_help_panel=CLIENT)(submissions.prompt)
app.command(rich_help_panel=CLIENT)(submissions.leaderboard)

app.command(rich_help_panel=RESEARCH)(batches.batch)
app.command(rich_help_panel=RESEARCH)(batches.results)
app.command(rich_help_panel=RESEARCH)(batches.cancel)
app.command(rich_help_panel=RESEARCH)(generate_cmd.generate)
app.command("fake-model", rich_help_panel=RESEARCH)(fake_model)
app.command("import-kernelbench", rich_help_panel=RESEARCH)(interop.import_kernelbench)
app.command("export-kernelbench", rich_help_panel=RESEARCH)(interop.export_kernelbench)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code. Expected failures (no server, 4xx, ...) print one line to stderr
    and map to the codes of `service.cli.exitcodes`; only a bug shows a traceback."""
    try:
        app(args=argv, prog_name="kernel-judge", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except JudgeError as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        return int(exitcodes.for_error(exc))
    except KeyboardInterrupt:
        return int(exitcodes.ExitCode.INTERRUPTED)
    return 0


if __name__ == "__main__":
    sys.exit(main())
