"""What a request that sets no sampling parameter gets: observed for the capture, compared by profile_diff.

``--generation-config`` (the model's generation_config.json by default) and
``--override-generation-config`` change the defaults without a word at the
API, and an upgrade may change them too. Where the render routes answer
(vLLM 0.28/0.29 always, 0.30+ with --enable-scale-out) they show the
resolved sampling parameters of a bare request. Elsewhere only what answers
show is recorded: the completions max_tokens default (``ignore_eos`` makes
the answer run to it) and whether sampling is greedy by default (two bare
requests give the greedy tokens; with sampling on, an open prompt does not).
"""

from __future__ import annotations

from typing import Any

from pytest_vllm_conformance.target.client import BoundedClient, Response

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
        "POST", "/v1/completions", json_body={"model": model, "prompt": PROMPT, "ignore_eos": True, **sampling}
    )


def _text(response: Response | None) -> str | None:
    payload: Any = response.json_or_none() if response is not None and response.status == 200 else None
    try:
        return payload["choices"][0]["text"]
    except (TypeError, KeyError, IndexError):
        return None


def observe_defaults(
    client: BoundedClient, model: str, max_model_len: Any, unobserved: dict[str, str]
) -> dict[str, Any] | None:
    """The ``generation_defaults`` section of a capture, or None (and why, in ``unobserved``)."""
    bare = _completion(client, model)
    usage = (bare.json_or_none() or {}).get("usage") if bare is not None and bare.status == 200 else None
    if not isinstance(usage, dict) or not isinstance(usage.get("completion_tokens"), int):
        unobserved["generation_defaults"] = "POST /v1/completions without max_tokens was not served"
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
        "completions_max_tokens": usage["completion_tokens"],
        "greedy": greedy,
        "chat_sampling": chat_sampling,
    }
