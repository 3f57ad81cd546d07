"""The effects of the parameters that narrow, penalize, bound or add to a request, read off the server's answers.

Each is judged against the server's own greedy answer to the same prompt, or
by the route's own count of its prompt's tokens: ignore_eos (with the
end-of-sequence token forced), top_k, top_p and min_p (narrowed to the top
token, the greedy answer), the presence, frequency and repetition penalties
(a greedy repeat broken), and what Responses' instructions and Anthropic's
system add to the prompt. The penalties' arithmetic is vLLM's apply_penalties
(vllm/model_executor/layers/utils.py at v0.28.0-v0.32.0): the repetition
penalty divides a positive logit of a token seen in the prompt or the answer
and multiplies a negative one, then the frequency penalty times the token's
count in the answer and the presence penalty are subtracted.
"""

from __future__ import annotations

from typing import Any

from pytest_vllm_conformance import undecided
from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.protocol import sse
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids

from .token_answers import (
    PATHS,
    SEED_COLLISION_BOUND,
    collision_chance,
    read_completion,
    request_body,
    sampled_logprobs,
    top_logprobs,
)

# Answers narrowed to their top token (top_k=1, a tiny top_p, min_p=1) are compared with greedy over this many.
NARROW_TOKENS = 6
# The largest presence and frequency penalties vLLM takes (SamplingParams._verify_args at v0.28.0-v0.32.0: within
# [-2, 2]); the repetition penalty has no upper bound there (only > 0), and this one makes a repeat near impossible.
MOST_PENALTY = 2.0
REPETITION_PENALTY = 1000.0
# A random-weight model's greedy answer seldom repeats a token, so a repeat is made: the greedy first token, given
# by logit_bias a lead of PENALTY_LEAD over the best other token at the next position (read off the raw logprobs,
# which vLLM computes before any bias or penalty: Sampler.forward, vllm/v1/sample/sampler.py at v0.28.0-v0.32.0),
# repeats, and a penalty of MOST_PENALTY must undo it. FORCED is vLLM's largest bias (it clamps to [-100, 100]).
PENALTY_LEAD = 1.0
FORCED = 100
# How many alternatives the forced answer's logprobs carry, to find the best other token.
PENALTY_ALTERNATIVES = 5
# How the common tokenizers spell their end-of-sequence token; the one the server stops at is found by probing
# (a logit_bias forcing it ends the answer at once), never assumed.
EOS_SPELLINGS = (
    "</s>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|im_end|>",
    "<eos>",
    "<end_of_turn>",
    "<|end|>",
)
# Words added in front of the prompt (Responses' instructions, Anthropic's system), counted in the prompt's tokens.
INSTRUCTIONS = "Answer in one short sentence, in plain English, without lists."


def ask(client: BoundedClient, model: str, route: str = "completions", **fields: Any) -> Any:
    """The answer's JSON (a streamed one's JSON chunks: stream=True) to ``request_body(route, model, **fields)``."""
    response = client.post(PATHS[route], request_body(route, model, **fields))
    assert response.status == 200, f"{fields} was not served: {response.describe()} {response.text[:300]!r}"
    if fields.get("stream"):
        parsed = sse.parse(response.body)
        assert not parsed.problems, f"{fields}: the stream is not well framed: {parsed.problems}"
        return [event.payload for event in parsed.chunks()]
    return response.json()


def token_id_named(name: str) -> int | None:
    """The id in a "token_id:123" name (return_tokens_as_token_ids), None for any other."""
    prefix, _, number = name.partition(":")
    return int(number) if prefix == "token_id" and number.isdigit() else None


def input_tokens(route: str, payload: dict[str, Any]) -> int | None:
    """The prompt's whole length in tokens by a Responses or Anthropic answer's usage (Anthropic leaves the cached
    part out of input_tokens and reports it apart, so it is added back)."""
    usage = payload.get("usage") or {}
    counted = usage.get("input_tokens")
    if not isinstance(counted, int):
        return None
    if route == "messages":
        counted += sum(usage.get(key) or 0 for key in ("cache_read_input_tokens", "cache_creation_input_tokens"))
    return counted


def end_of_sequence(client: BoundedClient, model: str, route: str) -> tuple[int | None, list[str]]:
    """(the token id the server ends an answer at, what was tried): the first of EOS_SPELLINGS that is one token
    of the server's tokenizer and, forced by logit_bias without ignore_eos, ends the answer at once with
    finish_reason stop and no stop string or stop token id as the reason."""
    tried = []
    for spelling in EOS_SPELLINGS:
        try:
            ids = token_ids(client, model, prompt=spelling, add_special_tokens=False)
        except TokenizeUnavailable as exc:
            tried.append(f"{spelling}: {exc}")
            break
        if len(ids) != 1:
            tried.append(f"{spelling}: {len(ids)} tokens")
            continue
        token = ids[0]
        response = client.post(PATHS[route], request_body(route, model, max_tokens=4, logit_bias={str(token): 100}))
        payload = response.json_or_none() if response.status == 200 else None
        answer = read_completion(payload) if isinstance(payload, dict) and payload.get("choices") else None
        if answer and answer.finish_reason == "stop" and answer.stop_reason is None and len(answer.token_ids) <= 1:
            return token, tried
        tried.append(f"{spelling}: token {token} does not end the answer ({response.status})")
    return None, tried


def narrowed_problem(client: BoundedClient, model: str, route: str, **narrowing: Any) -> str | None:
    """What is wrong with an answer at temperature 1 that ``narrowing`` leaves only its top token to draw: it must
    be the greedy one. Undecided when a plain sample repeats the greedy tokens with chance above
    SEED_COLLISION_BOUND (then a dropped narrowing would go unseen)."""
    fields = {"ignore_eos": True, "max_tokens": NARROW_TOKENS}
    greedy = read_completion(ask(client, model, route, **fields, **sampled_logprobs(route)))
    chance = collision_chance(greedy.logprobs)
    if chance is None or chance > SEED_COLLISION_BOUND:
        undecided(
            f"a sample at temperature 1 repeats the greedy tokens with chance {chance}: {narrowing} shows nothing"
        )
    narrowed = read_completion(ask(client, model, route, temperature=1, **fields, **narrowing))
    if narrowed.token_ids == greedy.token_ids:
        return None
    return (
        f"{narrowing} at temperature 1 gave {narrowed.token_ids}, not the greedy {greedy.token_ids} (a sample repeats "
        f"them with chance {chance:.1e})"
    )


def first_greedy_token(client: BoundedClient, model: str, route: str) -> int:
    return read_completion(ask(client, model, route, max_tokens=1)).token_ids[0]


def led_repeat(client: BoundedClient, model: str, route: str) -> tuple[int, float]:
    """(the greedy first token, the logit_bias that makes it repeat at once leading the best other token by
    PENALTY_LEAD); undecided when it repeats by itself by more than that, or the bias does not give that answer."""
    token = first_greedy_token(client, model, route)
    asked: dict[str, Any] = {"logprobs": PENALTY_ALTERNATIVES}
    if route == "chat":
        asked = {"logprobs": True, "top_logprobs": PENALTY_ALTERNATIVES}
    fields = {"max_tokens": 2, "return_tokens_as_token_ids": True, **asked}
    payload = ask(client, model, route, logit_bias={str(token): FORCED}, **fields)
    forced = read_completion(payload)
    positions = top_logprobs(route, payload["choices"][0])
    others = [value for name, value in positions[1][1] if token_id_named(name) != token] if len(positions) > 1 else []
    if forced.token_ids != [token, token] or not forced.logprobs or forced.logprobs[1] is None or not others:
        undecided(f"logit_bias +{FORCED} on {token} gave {forced.token_ids}, logprobs {str(positions)[:200]}")
    bias = max(others) - forced.logprobs[1] + PENALTY_LEAD
    if bias <= 0:
        undecided(f"the greedy first token {token} repeats by itself, leading by {PENALTY_LEAD - bias:.3f}")
    led = read_completion(ask(client, model, route, max_tokens=2, logit_bias={str(token): bias})).token_ids
    if led != [token, token]:
        undecided(f"logit_bias {bias:.3f} on {token} gave {led}, not the repeat its raw logprobs promise")
    return token, bias


def subtracted_penalty_problem(client: BoundedClient, model: str, route: str, **penalty: float) -> str | None:
    """What is wrong with a repeat led by PENALTY_LEAD under a presence or frequency penalty of MOST_PENALTY: the
    repeated token must lose its place (its logit lowered by the penalty times 1, the best other left alone)."""
    token, bias = led_repeat(client, model, route)
    fields = {"max_tokens": 2, "logit_bias": {str(token): bias}, **penalty}
    penalized = read_completion(ask(client, model, route, **fields)).token_ids
    if penalized[:1] == [token] and penalized[1:2] != [token]:
        return None
    return (
        f"{penalty} gave {penalized}: {token}, by logit_bias {bias:.3f} leading the best other token by "
        f"{PENALTY_LEAD} at its repeat, was not lowered below it"
    )


def added_prompt_tokens(client: BoundedClient, model: str, route: str, **added: Any) -> tuple[int | None, int | None]:
    """The input tokens the route counts for PROMPT without and with ``added`` (instructions, a system prompt)."""
    bound = {"max_output_tokens": 1} if route == "responses" else {"max_tokens": 1}
    without, with_ = (input_tokens(route, ask(client, model, route, **bound, **extra)) for extra in ({}, added))
    return without, with_
