"""What a request that sets no sampling parameter gets: observed for the capture, compared by profile_diff.

``--generation-config`` (the model's generation_config.json by default) and
``--override-generation-config`` change the defaults without a word at the
API, and an upgrade may change them too. Where the render routes answer
(vLLM 0.28/0.29 always, 0.30+ with --enable-scale-out) they show the
resolved sampling parameters of a bare request. Elsewhere only what answers
show is recorded: the completions max_tokens default (``ignore_eos`` makes
the answer run to it; streamed, and hung up on after 16 tokens, so a server
whose default is the rest of the context generates no long answer for a
capture: that default reads "more than 16") and whether sampling is greedy by
default (two bare requests give the greedy tokens; with sampling on, an open
prompt does not).
"""

from __future__ import annotations

from typing import Any

from pytest_vllm_conformance.connection.client import BoundedClient, Response, TransportFailure
from pytest_vllm_conformance.protocol import sse
from pytest_vllm_conformance.protocol.generation_routes import COMPLETIONS

PROMPT = "Write a story about"
MESSAGES = [{"role": "user", "content": PROMPT}]
GREEDY_PROBE_TOKENS = 12
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "max_tokens",
)
REST_OF_CONTEXT = "the rest of the context"
# The bare completion is read this far and no further: vLLM's completions default is 16
# (CompletionRequest.max_tokens), and a capture promises short generation requests.
BARE_TOKENS_READ = 16
LONGER_DEFAULT = f"more than {BARE_TOKENS_READ}"


def _render(client: BoundedClient, model: str, max_model_len: Any) -> dict[str, Any] | None:
    response = client.answer_or_none(
        "POST", "/v1/chat/completions/render", json_body={"model": model, "messages": MESSAGES}
    )
    payload = response.json_or_none() if response is not None and response.status == 200 else None
    if isinstance(payload, list):  # the batch form, one rendered request per prompt
        payload = payload[0] if payload else None
    if not isinstance(payload, dict) or not isinstance(payload.get("sampling_params"), dict):
        return None
    resolved = {key: payload["sampling_params"][key] for key in SAMPLING_KEYS if key in payload["sampling_params"]}
    prompt_tokens = len(payload.get("token_ids") or [])
    if isinstance(max_model_len, int) and resolved.get("max_tokens") == max_model_len - prompt_tokens:
        resolved["max_tokens"] = REST_OF_CONTEXT
    return resolved


def _completion(client: BoundedClient, model: str, **sampling: Any) -> Response | None:
    return client.answer_or_none(
        "POST", COMPLETIONS.path, json_body={"model": model, "prompt": PROMPT, "ignore_eos": True, **sampling}
    )


def _text(response: Response | None) -> str | None:
    payload: Any = response.json_or_none() if response is not None and response.status == 200 else None
    try:
        return payload["choices"][0]["text"]
    except (TypeError, KeyError, IndexError):
        return None


def _unfinished_past_the_read(body: bytes) -> bool:
    """The bare stream carried BARE_TOKENS_READ text chunks (a token or more each) and no finish_reason yet."""
    choices = [choice for event in sse.parse(body).chunks() for choice in event.choices()]
    texts = sum(1 for choice in choices if choice.get("text"))
    return texts >= BARE_TOKENS_READ and not any(choice.get("finish_reason") for choice in choices)


def completions_max_tokens(client: BoundedClient, model: str) -> int | str | None:
    """The completions max_tokens default: what a bare streamed request (``ignore_eos``) runs to.

    Its usage chunk counts the tokens when the stream ends within
    BARE_TOKENS_READ; a stream still going after them is hung up on (vLLM
    stops generating for a caller gone) and reads LONGER_DEFAULT. None when
    it was not served or carried no usage.
    """
    body = {"model": model, "prompt": PROMPT, "ignore_eos": True, "stream": True}
    body["stream_options"] = {"include_usage": True}
    try:
        response = client.post(COMPLETIONS.path, body, enough=_unfinished_past_the_read)
    except TransportFailure:  # RequestTimeout is one
        return None
    if response.status != 200:
        return None
    if response.truncated:
        return LONGER_DEFAULT if _unfinished_past_the_read(response.body) else None
    usage = [event.payload.get("usage") for event in sse.parse(response.body).chunks()]
    counted = [u.get("completion_tokens") for u in usage if isinstance(u, dict)]
    return counted[-1] if counted and isinstance(counted[-1], int) else None


def observe_defaults(
    client: BoundedClient, model: str, max_model_len: Any, unobserved: dict[str, str]
) -> dict[str, Any] | None:
    """The ``generation_defaults`` section of a capture, or None (and why, in ``unobserved``)."""
    max_tokens = completions_max_tokens(client, model)
    if max_tokens is None:
        unobserved["generation_defaults"] = (
            "POST /v1/completions without max_tokens, streamed with include_usage, was not served with its usage"
        )
        return None
    chat_sampling = _render(client, model, max_model_len)
    if chat_sampling is not None:
        greedy = chat_sampling.get("temperature") == 0
    else:
        greedy_text = _text(_completion(client, model, max_tokens=GREEDY_PROBE_TOKENS, temperature=0))
        bare_texts = [_text(_completion(client, model, max_tokens=GREEDY_PROBE_TOKENS)) for _ in range(2)]
        greedy = greedy_text is not None and all(text == greedy_text for text in bare_texts)
    return {
        "source": "render" if chat_sampling is not None else "answers",
        "completions_max_tokens": max_tokens,
        "greedy": greedy,
        "chat_sampling": chat_sampling,
    }
