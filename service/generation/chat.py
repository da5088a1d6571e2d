"""A minimal client of the OpenAI-compatible `POST /v1/chat/completions` (vLLM, SGLang, Ollama, hosted APIs).

Plain httpx rather than an SDK: the protocol used here is one request and one field of the answer
(`choices[0].message.content`), and every server above speaks it. One sample per request (n=1), because
several servers ignore or reject `n > 1`; the loop runs requests concurrently instead.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from service.client.calls import retry_after_s

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class ChatError(Exception):
    """The model endpoint failed (unreachable, an error status after retries, an answer without text)."""


@dataclass
class ChatClient:
    """`base_url` ends before `/chat/completions` (e.g. http://localhost:8001/v1), as OPENAI_BASE_URL does."""

    base_url: str = field(default_factory=lambda: os.environ.get("OPENAI_BASE_URL", DEFAULT_BASE_URL))
    api_key: str | None = field(default_factory=lambda: os.environ.get("OPENAI_API_KEY"))
    timeout_s: float = 600.0
    """Long: a reasoning model may think for minutes before it answers."""
    attempts: int = 4

    def __post_init__(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self._http = httpx.Client(base_url=self.base_url.rstrip("/"), headers=headers, timeout=self.timeout_s)

    def close(self) -> None:
        self._http.close()

    def complete(self, messages: list[dict[str, str]], *, model: str, **sampling: Any) -> str:
        """The assistant's reply text. Retries 429/5xx and connection resets with backoff (Retry-After first)."""
        body = {"model": model, "messages": messages, "n": 1,
                **{k: v for k, v in sampling.items() if v is not None}}
        for attempt in range(1, self.attempts + 1):
            try:
                response = self._http.post("/chat/completions", json=body)
            except httpx.TransportError as exc:
                if attempt == self.attempts:
                    raise ChatError(f"no chat-completions server at {self.base_url}: {exc}") from None
                time.sleep(min(2 ** attempt, 30))
                continue
            if response.status_code in (429, 500, 502, 503, 504) and attempt < self.attempts:
                time.sleep(min(retry_after_s(response.headers.get("retry-after")) or 2 ** attempt, 60))
                continue
            if response.status_code >= 400:
                raise ChatError(f"{response.status_code} from {self.base_url}/chat/completions: {response.text[:500]}")
            return _content(response)
        raise AssertionError("unreachable")


def _content(response: httpx.Response) -> str:
    try:
        message = response.json()["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ChatError(f"not a chat-completions answer: {response.text[:300]}") from None
    content = message.get("content")
    if isinstance(content, list):  # some servers return content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    if not isinstance(content, str):
        raise ChatError("the answer has no text content")
    return content
