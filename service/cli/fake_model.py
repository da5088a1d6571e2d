"""`kernel-judge fake-model`: serve the fake model (service/fakemodel) for `generate` to call, without an LLM."""

from typing import Annotated

import typer


def fake_model(host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
               port: Annotated[int, typer.Option(help="TCP port (not the judge's).")] = 8100,
               compile_error_every: Annotated[int, typer.Option(
                   min=0, help="Every n-th first turn gets a kernel that does not compile (0: none).")] = 2,
               api_key: Annotated[str | None, typer.Option(
                   envvar="FAKE_MODEL_API_KEY", show_default=False,
                   help="Require this key (Authorization: Bearer); by default none is asked.")] = None,
               ) -> None:
    """Serve an OpenAI-compatible chat endpoint answering the judge's prompts with corpus-style kernels (C++ for
    `--language cpp`, CUDA for `cuda`), so `generate` runs end to end: OPENAI_BASE_URL=http://HOST:PORT/v1."""
    import uvicorn

    from service.fakemodel import FakeModel, create_app

    typer.echo(f"fake model: OPENAI_BASE_URL=http://{host}:{port}/v1", err=True)
    uvicorn.run(create_app(FakeModel(compile_error_every), api_key), host=host, port=port, log_level="warning")
