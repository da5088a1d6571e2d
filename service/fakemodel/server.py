"""The fake model's HTTP face: OpenAI's `POST /v1/chat/completions` and `GET /v1/models`, nothing else.

The body is checked as an OpenAI server would (a model name, at least one message with a role and text), so a
client's mistake is a 422 that names the field; sampling fields (temperature, max_tokens, top_p, ...) are
accepted and ignored: the script is deterministic. With an API key set, requests without it get a 401.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

from fastapi import Depends, FastAPI, Header, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from service.fakemodel.script import FakeModel

MODEL_ID = "kernel-judge-fake"
"""The one model `GET /v1/models` lists; requests may name any model."""


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    n: int = Field(1, ge=1, le=16, description="Answers asked for: each is the script's next answer.")


def create_app(model: FakeModel | None = None, api_key: str | None = None) -> FastAPI:
    """The server's app around `model` (a fresh script by default)."""
    script = model or FakeModel()
    app = FastAPI(title="kernel-judge fake model", description=__doc__)

    def authorised(authorization: Annotated[str | None, Header()] = None) -> None:
        if api_key and authorization != f"Bearer {api_key}":
            raise HTTPException(401, {"message": "missing or wrong API key: send Authorization: Bearer <key>",
                                      "type": "invalid_request_error"})

    @app.get("/v1/models", dependencies=[Depends(authorised)])
    def models() -> dict:
        return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "kernel-judge"}]}

    @app.post("/v1/chat/completions", dependencies=[Depends(authorised)])
    def chat(request: ChatRequest) -> dict:
        messages = [m.model_dump() for m in request.messages]
        choices = [{"index": i, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": script.answer(messages)}} for i in range(request.n)]
        return {"id": f"chatcmpl-fake-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
                "model": request.model, "choices": choices,
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    return app
