"""The server's own tokenizer: the one sender of ``/tokenize`` for every feature and suite, and its reader.

Prompts sized, seeded or scored in tokens are measured by the server under
test, never by a local tokenizer, so a check holds for whatever model it
serves. Whoever cannot get the ids gets one exception type with one wording,
and decides what that means for its verdict (undecided, unobserved, failed).
"""

from __future__ import annotations

from typing import Any

from pytest_vllm_conformance.connection.client import BoundedClient, Response, TransportFailure


def tokenized(response: Response) -> list[int] | None:
    """The token ids of a ``/tokenize`` answer, or None when the answer is not one."""
    payload = response.json_or_none() if response.status == 200 else None
    tokens = payload.get("tokens") if isinstance(payload, dict) else None
    return tokens if isinstance(tokens, list) else None


class TokenizeUnavailable(Exception):
    """``/tokenize`` gave no token ids (no answer, a refusal, or a body that is not one).

    ``response`` is the answer that came, None when none did: an observer
    records what it could not see by it.
    """

    def __init__(self, message: str, response: Response | None = None) -> None:
        super().__init__(message)
        self.response = response


def send(client: BoundedClient, body: dict[str, Any], *, max_body: int | None = None) -> Response:
    """``POST /tokenize`` with ``body`` as it is; a transport failure raises (``TransportFailure``)."""
    return client.post("/tokenize", body, **({"max_body": max_body} if max_body is not None else {}))


def answer_or_none(client: BoundedClient, body: dict[str, Any]) -> Response | None:
    """``send``, or None when no answer came: for observers that record what they could not see."""
    try:
        return send(client, body)
    except TransportFailure:
        return None


def token_ids(
    client: BoundedClient,
    model: str,
    *,
    prompt: str | None = None,
    messages: list[dict[str, Any]] | None = None,
    add_special_tokens: bool | None = None,
    max_body: int | None = None,
    minimum: int = 0,
    **extra: Any,
) -> list[int]:
    """The token ids of ``prompt`` (or of ``messages`` through the chat template), at least ``minimum`` of them.

    ``max_body`` raises the client's byte cap for a long prompt (every id costs
    a few bytes of JSON); ``extra`` goes into the body as it is (e.g.
    ``add_generation_prompt``).
    """
    body: dict[str, Any] = {"model": model, **({"prompt": prompt} if messages is None else {"messages": messages})}
    if add_special_tokens is not None:
        body["add_special_tokens"] = add_special_tokens
    body.update(extra)
    try:
        response = send(client, body, max_body=max_body)
    except TransportFailure as exc:
        raise TokenizeUnavailable(f"/tokenize: {exc}") from None
    tokens = tokenized(response)
    if tokens is None:
        raise TokenizeUnavailable(
            f"/tokenize did not return tokens: {response.describe()} {response.text[:200]!r}", response
        )
    if len(tokens) < max(minimum, 1):
        what = repr(prompt) if messages is None else "the messages"
        raise TokenizeUnavailable(
            f"/tokenize gave {len(tokens)} token ids for {what}, fewer than {max(minimum, 1)}", response
        )
    return tokens
