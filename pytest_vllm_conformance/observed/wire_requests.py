"""The wire checks' requests, one ``Exchange`` each: where it goes, its answer's schema, what it asks of a stream.

The wire suite sends them and judges the answers; the capture sends its own
six (``wire_extensions.py``) to observe the fields a server adds. Both read
the answers by the protocol floor's schemas, so the request lives here, below
both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance.protocol import generation_routes
from pytest_vllm_conformance.protocol.generation_routes import CHAT, CLASSIFY, EMBEDDINGS

MAX_TOKENS = 4
PROMPT = "Name three colours."
TOP_LOGPROBS = 2
RESPONSES = generation_routes.RESPONSES.path


@dataclass(frozen=True)
class Exchange:
    """One request of the suite: where it goes, which schema its answer has, what it asks of a stream."""

    name: str
    path: str
    answer: str  # the schema of the answer (of each event, for a stream)
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    stream_options: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)  # beyond include_usage

    @property
    def id(self) -> str:
        return f"{self.path} {self.name}"

    def __str__(self) -> str:
        return self.id

    @property
    def chat(self) -> bool:
        return self.path == CHAT.path

    def body(self, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "max_tokens": MAX_TOKENS, "temperature": 0, **self.extra}
        if self.path in (EMBEDDINGS, CLASSIFY):
            return {"model": model, "input": [PROMPT]}
        if self.path == RESPONSES:
            body = {"model": model, "input": PROMPT, "max_output_tokens": MAX_TOKENS, "temperature": 0, **self.extra}
            return {**body, "stream": True} if self.stream else body
        body.update({"messages": [{"role": "user", "content": PROMPT}]} if self.chat else {"prompt": PROMPT})
        if self.logprobs:
            body.update({"logprobs": True, "top_logprobs": TOP_LOGPROBS} if self.chat else {"logprobs": TOP_LOGPROBS})
        if self.stream:
            body["stream"] = True
            if self.include_usage:
                body["stream_options"] = {"include_usage": True, **self.stream_options}
        return body
