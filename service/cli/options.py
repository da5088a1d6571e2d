"""Options shared by the client commands (URL, key, --json), the consoles, and the client they open.

stdout carries the answer (ids, tables, JSON); stderr carries progress and errors, so
`kernel-judge submit ... | xargs` and `--json | jq` work.
"""

import json
import sys
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console

from service.client import DEFAULT_URL, JudgeClient

# A terminal gets its own width; a pipe or a file gets room for the summary tables (rich would assume 80).
_WIDTH = None if sys.stdout.isatty() else 160

out = Console(width=_WIDTH, soft_wrap=False)
err = Console(stderr=True, width=_WIDTH, soft_wrap=True)

Url = Annotated[str, typer.Option("--url", envvar="JUDGE_URL", help="The judge's base URL.", show_default=True)]
Key = Annotated[str | None, typer.Option("--key", envvar="JUDGE_API_KEY", show_default=False,
                                         help="API key (Bearer); needed to submit.")]
Json = Annotated[bool, typer.Option("--json", help="Machine output: JSON on stdout.")]

URL_DEFAULT = DEFAULT_URL


def client(url: str, key: str | None) -> JudgeClient:
    return JudgeClient(url, key or "")


def print_json(value: Any) -> None:
    """JSON on stdout, plain (no rich markup or wrapping), one document."""
    if isinstance(value, BaseModel):
        text = value.model_dump_json(indent=2)
    elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
        text = json.dumps([v.model_dump(mode="json") for v in value], indent=2)
    else:
        text = json.dumps(value, indent=2, default=str)
    typer.echo(text)
