"""`kernel-judge judging`: what the service at --url can judge now, and where a GPU worker would come from."""

from __future__ import annotations

import httpx
import typer

from service.cli.exitcodes import ExitCode
from service.cli.options import URL_DEFAULT, Json, Url, err, out, print_json


def judging(url: Url = URL_DEFAULT, as_json: Json = False) -> None:
    """Say what this service can judge (GET /v1/judging): a GPU or not, the kernel languages, and where a GPU worker
    comes from. A submission none of its workers can judge is refused (422) naming what is missing."""
    try:
        answer = httpx.get(f"{url.rstrip('/')}/v1/judging", timeout=30.0)
        answer.raise_for_status()
    except httpx.HTTPError as exc:
        err.print(f"[red]error:[/] could not ask {url} what it judges: {exc}")
        raise typer.Exit(ExitCode.UNREACHABLE) from None
    found = answer.json()
    if as_json:
        print_json(found)
        return
    out.print(found["statement"], markup=False)
    out.print(f"judges: {', '.join(found['judges']) or 'nothing known yet'} ({found['workers']} worker(s) seen); "
              f"GPU workers: {found['gpu_workers']}", markup=False)
