"""Generation requests whose prompt has an exact token length, for the context checks.

A boundary check is only as exact as its prompt: one token off and "at the
limit" becomes "one over". Completions accept a prompt as token ids, so its
length is exact by construction. A chat prompt is text inside the model's
chat template, so its length is measured with /tokenize (on the messages,
template included) and the message is grown or shrunk until the rendered
prompt has the wanted count. Token ids and the filler word both come from
the server's own tokenizer, so no tokenizer is assumed here.

Every request is greedy with ``ignore_eos``, so the completion runs to
``max_tokens`` unless the server cuts it: a shorter completion is then a
clamp, not the model choosing to stop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pytest_vllm_conformance.catalogue.cases import CaseContext
from pytest_vllm_conformance.connection.client import BoundedClient, Response
from pytest_vllm_conformance.protocol import error_envelope
from pytest_vllm_conformance.protocol.generation_routes import CHAT, COMPLETIONS
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids

# Tokenized once for the ids of completion prompts (cycled to any length).
SEED_TEXT = "conformance probe of the context limit"
# Words tried as chat filler; the first that adds exactly one token per repetition wins.
FILLER_WORDS = ("a", "the", "x", "0", "hello")
CALIBRATION_WORDS = (8, 16)
MEASURE_ATTEMPTS = 4
ERROR_CHARS = 300


class PromptUnavailable(Exception):
    """A prompt of the wanted length cannot be built on this server; the message says why."""


@dataclass(frozen=True)
class Generation:
    """One generation request at a chosen prompt length, and what the server made of it."""

    endpoint: str
    prompt_tokens: int
    max_tokens: int
    response: Response

    @property
    def status(self) -> int:
        return self.response.status

    @property
    def _payload(self) -> dict[str, Any]:
        payload = self.response.json_or_none()
        return payload if isinstance(payload, dict) else {}

    @property
    def usage(self) -> dict[str, Any]:
        return self._payload.get("usage") or {}

    @property
    def served_prompt_tokens(self) -> int | None:
        return self.usage.get("prompt_tokens")

    @property
    def completion_tokens(self) -> int | None:
        return self.usage.get("completion_tokens")

    @property
    def finish_reason(self) -> str | None:
        choices = self._payload.get("choices") or [{}]
        return choices[0].get("finish_reason") if isinstance(choices[0], dict) else None

    @property
    def error(self) -> dict[str, Any]:
        return error_envelope.error(self.response)

    @property
    def error_message(self) -> str:
        message = self.error.get("message")
        return message if isinstance(message, str) else self.response.text[:ERROR_CHARS]

    def __str__(self) -> str:
        request = f"POST {self.endpoint} with a prompt of {self.prompt_tokens} tokens and max_tokens {self.max_tokens}"
        answer = f"{self.status} in {self.response.elapsed * 1000:.0f} ms"
        if self.status == 200:
            detail = (
                f"usage prompt_tokens={self.served_prompt_tokens} completion_tokens={self.completion_tokens}, "
                f"finish_reason={self.finish_reason}"
            )
        else:
            detail = f"param={self.error.get('param')!r} {self.error_message[:ERROR_CHARS]!r}"
        return f"{request} -> {answer}: {detail}"


@dataclass(frozen=True)
class ContextEndpoint:
    """A generation route whose prompt counts against max_model_len."""

    path: str
    prompt_kind: Literal["token_ids", "chat"]

    @property
    def id(self) -> str:
        return f"POST {self.path}"

    def __str__(self) -> str:
        return self.id

    def generate(self, client: BoundedClient, model: str, prompt_tokens: int, max_tokens: int) -> Generation:
        """Send a prompt of exactly ``prompt_tokens`` tokens; raises PromptUnavailable if none can be built."""
        prompt: dict[str, Any]
        if self.prompt_kind == "token_ids":
            prompt = {"prompt": _token_ids(client, model, prompt_tokens)}
        else:
            prompt = {"messages": _chat_messages(client, model, prompt_tokens)}
        body = {"model": model, **prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        return Generation(self.path, prompt_tokens, max_tokens, client.post(self.path, body))


CONTEXT_ENDPOINTS = (
    ContextEndpoint(COMPLETIONS.path, "token_ids"),
    ContextEndpoint(CHAT.path, "chat"),
)


def _measured(client: BoundedClient, model: str, **prompt: Any) -> list[int]:
    try:
        return token_ids(client, model, **prompt)
    except TokenizeUnavailable as exc:
        raise PromptUnavailable(f"cannot measure prompts: {exc}") from None


def _token_ids(client: BoundedClient, model: str, length: int) -> list[int]:
    seed = _measured(client, model, prompt=SEED_TEXT, add_special_tokens=False)
    return [seed[i % len(seed)] for i in range(length)]


def _messages(word: str, repetitions: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": " ".join([word] * repetitions)}]


def _chat_length(client: BoundedClient, model: str, messages: list[dict[str, str]]) -> int:
    # The server renders the template with the generation prompt, as a chat request does.
    return len(_measured(client, model, messages=messages, add_generation_prompt=True))


def _chat_messages(client: BoundedClient, model: str, length: int) -> list[dict[str, str]]:
    few, more = CALIBRATION_WORDS
    for word in FILLER_WORDS:
        short = _chat_length(client, model, _messages(word, few))
        if _chat_length(client, model, _messages(word, more)) - short != more - few:
            continue  # this word merges with its neighbours; its count is not linear
        repetitions = length - (short - few)
        for _ in range(MEASURE_ATTEMPTS):
            if repetitions < 1:
                break
            measured = _chat_length(client, model, _messages(word, repetitions))
            if measured == length:
                return _messages(word, repetitions)
            repetitions += length - measured
        raise PromptUnavailable(
            f"cannot build a chat prompt of exactly {length} tokens: the chat template alone is "
            f"about {short - few} tokens, and filler {word!r} did not converge"
        )
    raise PromptUnavailable(f"no filler word in {FILLER_WORDS} adds one token per repetition to a chat prompt")


def context_endpoints(ctx: CaseContext) -> list[ContextEndpoint]:
    """Generation routes whose prompt counts against max_model_len."""
    return [e for e in CONTEXT_ENDPOINTS if ctx.server.serves("POST", e.path)]


def assert_refused_naming_the_limit(generation: Generation, max_model_len: int, refusal: dict[str, Any]) -> None:
    """The verdict two checks share: refused as the release refuses (fact ``context_limit_refusal``), naming the
    limit /v1/models advertises."""
    assert generation.status < 500, (
        f"a server error instead of a refusal naming max_model_len {max_model_len}: {generation}"
    )
    assert generation.status == refusal["status"], (
        f"expected {refusal['status']} naming max_model_len {max_model_len}, got {generation}"
    )
    param = generation.error.get("param")
    assert param in refusal["params"], (
        f"the refusal names param {param!r}, not one of {refusal['params']}: {generation}"
    )
    named = re.search(refusal["limit_in_message"], generation.error_message)
    named_limit = int(named.group(1)) if named else None
    assert named_limit == max_model_len, (
        f"the refusal names a limit of {named_limit}, but /v1/models reports max_model_len {max_model_len}: "
        f"the server enforces another limit than it advertises: {generation}"
    )
