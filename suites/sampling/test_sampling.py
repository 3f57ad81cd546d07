"""Sampling parameters: what a request asks for, it gets, judged by the effect on the server's own answer.

An upgrade that renames or drops a request parameter rarely fails: vLLM
ignores what it does not know and the answer looks fine. Our models have
random weights, so each check compares against the server's own greedy or
seeded answer to the same prompt (token_answers.py); a model whose answer
cannot show the effect (no stop string to take) is undecided, never failed.
Each parameter chat takes is judged on both routes: chat builds its sampling
parameters apart from completions (its own request model); prompt_logprobs and
echo are judged on completions.
"""

import pytest

from pytest_vllm_conformance import contract, known_departure, undecided
from pytest_vllm_conformance.protocol.generation_routes import MESSAGES
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids

from .effects import (
    FORCED,
    INSTRUCTIONS,
    MOST_PENALTY,
    NARROW_TOKENS,
    REPETITION_PENALTY,
    added_prompt_tokens,
    ask,
    end_of_sequence,
    first_greedy_token,
    narrowed_problem,
    subtracted_penalty_problem,
)
from .token_answers import (
    PATHS,
    PROMPT,
    ROUTES,
    SEED_COLLISION_BOUND,
    UNSUPPORTED_PROBES,
    collision_chance,
    first_new_token,
    read_completion,
    request_body,
    sampled_logprobs,
    stop_candidate,
    streamed_token_ids,
    top_logprobs,
)

N_CHOICES = 3
EXACT_TOKENS = 8
TOP_LOGPROBS = 3


INCLUDE_USAGE = {"stream_options": {"include_usage": True}}


def complete(client, model, **fields):
    return ask(client, model, "completions", **fields)


@contract("sampling.n_gives_n_choices")
@pytest.mark.parametrize("route", ROUTES)
def test_n_gives_n_choices(route, vllm_client, vllm_facts, vllm_evidence):
    payload = ask(vllm_client, vllm_facts.model, route, n=N_CHOICES, temperature=1, max_tokens=4)
    indexes = sorted(choice.get("index") for choice in payload["choices"])
    assert indexes == list(range(N_CHOICES)), f"n={N_CHOICES} gave choices with indexes {indexes}"
    vllm_evidence.judged(len(indexes), "choices")


@contract("sampling.max_tokens_exact_with_ignore_eos")
def test_max_tokens_exact_with_ignore_eos(vllm_client, vllm_facts, vllm_evidence):
    answer = read_completion(complete(vllm_client, vllm_facts.model, max_tokens=EXACT_TOKENS, ignore_eos=True))
    assert (answer.completion_tokens, len(answer.token_ids)) == (EXACT_TOKENS, EXACT_TOKENS), (
        f"max_tokens={EXACT_TOKENS} with ignore_eos gave {answer.completion_tokens} tokens by usage, "
        f"{len(answer.token_ids)} token ids, finish_reason {answer.finish_reason}"
    )
    assert answer.finish_reason == "length", f"finish_reason {answer.finish_reason}, not length"
    streamed = complete(
        vllm_client, vllm_facts.model, max_tokens=EXACT_TOKENS, ignore_eos=True, stream=True, **INCLUDE_USAGE
    )
    counted = streamed_token_ids(streamed)
    if counted is None:
        undecided(f"the stream carries no token_ids to count (return_token_ids): {len(streamed)} chunks")
    # Not one chunk per token: vLLM merges the outputs of a request its API server has not sent yet
    # (RequestOutputCollector in vllm/v1/engine/output_processor.py), so a busy server sends fewer chunks.
    chunks, streamed_ids = counted
    assert streamed_ids == EXACT_TOKENS, (
        f"max_tokens={EXACT_TOKENS} with ignore_eos streamed {streamed_ids} token ids in {chunks} chunks"
    )
    vllm_evidence.judged(2 * EXACT_TOKENS, "tokens, unstreamed and streamed")


@contract("sampling.stop_string_ends_answer")
@pytest.mark.parametrize("route", ROUTES)
def test_stop_string_ends_answer(route, vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(ask(vllm_client, vllm_facts.model, route, ignore_eos=True))
    candidate = stop_candidate(greedy.text)
    if candidate is None:
        undecided(f"the greedy answer {greedy.text!r} has no stop string to take from its middle")
    stop, before = candidate
    cut = read_completion(ask(vllm_client, vllm_facts.model, route, ignore_eos=True, stop=[stop]))
    assert (cut.text, cut.finish_reason) == (before, "stop"), (
        f"stop={stop!r} gave {cut.text!r} ({cut.finish_reason}), not the greedy answer up to it: {before!r} (stop)"
    )
    assert cut.stop_reason == stop, f"stop_reason {cut.stop_reason!r}, not the stop string {stop!r}"
    kept = read_completion(
        ask(vllm_client, vllm_facts.model, route, ignore_eos=True, stop=[stop], include_stop_str_in_output=True)
    )
    assert kept.text == before + stop, f"include_stop_str_in_output gave {kept.text!r}, not {before + stop!r}"
    vllm_evidence.judged(2, "stopped answers")


@contract("sampling.stop_token_id_ends_answer")
@pytest.mark.parametrize("route", ROUTES)
def test_stop_token_id_ends_answer(route, vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(ask(vllm_client, vllm_facts.model, route, ignore_eos=True))
    found = first_new_token(greedy.token_ids, 2)
    if found is None:
        undecided(f"the greedy tokens {greedy.token_ids} repeat from the third on: no stop token to take")
    token, position = found
    cut = read_completion(ask(vllm_client, vllm_facts.model, route, ignore_eos=True, stop_token_ids=[token]))
    assert cut.token_ids[:position] == greedy.token_ids[:position] and len(cut.token_ids) <= position + 1, (
        f"stop_token_ids=[{token}] gave tokens {cut.token_ids}, not the greedy {greedy.token_ids} up to position "
        f"{position}"
    )
    assert (cut.finish_reason, cut.stop_reason) == ("stop", token), (
        f"finish_reason {cut.finish_reason}, stop_reason {cut.stop_reason!r}; expected stop, {token}"
    )
    vllm_evidence.judged(1, "stopped answers")


@contract("sampling.min_tokens_holds_back_stop")
@pytest.mark.parametrize("route", ROUTES)
def test_min_tokens_holds_back_stop(route, vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(ask(vllm_client, vllm_facts.model, route, ignore_eos=True))
    found = first_new_token(greedy.token_ids, 1)
    if found is None:
        undecided(f"the greedy tokens {greedy.token_ids} are one token repeated: no stop token to take")
    token, position = found
    least = position + 3
    held = read_completion(
        ask(vllm_client, vllm_facts.model, route, stop_token_ids=[token], min_tokens=least, max_tokens=least + 2)
    )
    assert len(held.token_ids) >= least and token not in held.token_ids[:least], (
        f"min_tokens={least} with stop_token_ids=[{token}] (greedy position {position}) gave {held.token_ids}"
    )
    vllm_evidence.judged(1, "held answers")


@contract("sampling.seed_reproducible")
@pytest.mark.parametrize("route", ROUTES)
def test_seed_reproducible(route, vllm_client, vllm_facts, vllm_evidence):
    def sample(seed):
        fields = {"temperature": 1, "seed": seed, "ignore_eos": True, **sampled_logprobs(route)}
        return read_completion(ask(vllm_client, vllm_facts.model, route, **fields))

    first, again, other = sample(1234), sample(1234), sample(4321)
    chance = collision_chance(first.logprobs)
    if chance is None or chance > SEED_COLLISION_BOUND:
        undecided(f"a different seed repeats these tokens with chance {chance} (bound {SEED_COLLISION_BOUND})")
    assert again.token_ids == first.token_ids, f"seed 1234 twice: {first.token_ids} then {again.token_ids}"
    assert other.token_ids != first.token_ids, (
        f"seeds 1234 and 4321 gave the same tokens {first.token_ids}, a chance of {chance:.1e} if the seed was applied"
    )
    vllm_evidence.judged(3, "seeded answers")


@contract("sampling.logit_bias_forces_token")
@pytest.mark.parametrize("route", ROUTES)
def test_logit_bias_forces_token(route, vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(ask(vllm_client, vllm_facts.model, route, ignore_eos=True, max_tokens=4))
    token = next(t for t in (greedy.token_ids[-1], greedy.token_ids[0] + 1) if t != greedy.token_ids[0])
    biased = read_completion(
        ask(vllm_client, vllm_facts.model, route, ignore_eos=True, max_tokens=4, logit_bias={str(token): 100})
    )
    assert biased.token_ids == [token] * 4, f"logit_bias +100 on {token} gave {biased.token_ids}"
    vllm_evidence.judged(4, "biased tokens")


@contract("sampling.logprobs_as_asked")
@pytest.mark.parametrize("route", ROUTES)
def test_logprobs_as_asked(route, vllm_client, vllm_facts, vllm_evidence):
    # Completions name the alternatives by token text; as token ids two alternatives cannot share a name.
    asked = {"logprobs": True, "top_logprobs": TOP_LOGPROBS} if route == "chat" else {"logprobs": TOP_LOGPROBS}
    payload = ask(vllm_client, vllm_facts.model, route, max_tokens=4, return_tokens_as_token_ids=True, **asked)
    positions = top_logprobs(route, payload["choices"][0])
    assert positions, f"{asked} gave no logprobs: {str(payload)[:300]!r}"
    for place, (token, alternatives) in enumerate(positions):
        values = [value for _, value in alternatives]
        where = f"position {place}: {token!r} among {alternatives}"
        assert len(values) == TOP_LOGPROBS, f"{len(values)} top logprobs, not {TOP_LOGPROBS}, at {where}"
        assert values == sorted(values, reverse=True) and all(v <= 0 for v in values), f"not sorted, <= 0 at {where}"
        assert token in [name for name, _ in alternatives], f"the greedy token is not among its top logprobs at {where}"
    vllm_evidence.judged(len(positions), "positions")


@contract("sampling.allowed_token_ids_keep_inside")
@pytest.mark.parametrize("route", ROUTES)
def test_allowed_token_ids_keep_inside(route, vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(ask(vllm_client, vllm_facts.model, route, ignore_eos=True))
    first = greedy.token_ids[0]
    # Tokens the model itself produced (so real ids), the greedy first token left out: kept inside the set, the
    # answer cannot start as the greedy one does.
    allowed = sorted({token for token in greedy.token_ids if token != first})[:2]
    if not allowed:
        undecided(f"the greedy tokens {greedy.token_ids} are one token repeated: no other token to allow")
    kept = read_completion(
        ask(vllm_client, vllm_facts.model, route, ignore_eos=True, max_tokens=4, allowed_token_ids=allowed)
    )
    assert kept.token_ids and set(kept.token_ids) <= set(allowed), (
        f"allowed_token_ids={allowed} gave tokens {kept.token_ids} (greedy: {greedy.token_ids})"
    )
    vllm_evidence.judged(len(kept.token_ids), "tokens")


@contract("sampling.bad_words_keep_outside")
@pytest.mark.parametrize("route", ROUTES)
def test_bad_words_keep_outside(route, vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(ask(vllm_client, vllm_facts.model, route, ignore_eos=True, **sampled_logprobs(route)))
    # A bad word is banned as its tokenization (vLLM's SamplingParams.update_from_tokenizer): take the first greedy
    # token whose text, stripped as vLLM strips it, tokenizes to that very token, so the ban must remove it.
    banned = None
    for token, text in zip(greedy.token_ids, greedy.tokens, strict=False):
        if text.strip() and tokenize(vllm_client, vllm_facts.model, text.lstrip()) == [token]:
            banned = token, text.lstrip()
            break
    if banned is None:
        undecided(f"no greedy token of {greedy.tokens} is its own text's tokenization: no bad word to take")
    token, word = banned
    kept = read_completion(ask(vllm_client, vllm_facts.model, route, ignore_eos=True, bad_words=[word]))
    assert token not in kept.token_ids, (
        f"bad_words=[{word!r}] (token {token}) gave tokens {kept.token_ids} (greedy: {greedy.token_ids})"
    )
    vllm_evidence.judged(len(kept.token_ids), "tokens")


def tokenize(client, model, text):
    try:
        return token_ids(client, model, prompt=text, add_special_tokens=False)
    except TokenizeUnavailable as exc:
        undecided(f"the server's tokenizer cannot say which word is one token: {exc}")


@contract("sampling.prompt_logprobs_per_prompt_token")
def test_prompt_logprobs_per_prompt_token(vllm_client, vllm_facts, vllm_evidence):
    payload = complete(vllm_client, vllm_facts.model, max_tokens=1, prompt_logprobs=1)
    choice = payload["choices"][0]
    prompt, entries = choice.get("prompt_token_ids") or [], choice.get("prompt_logprobs")
    assert entries is not None, f"prompt_logprobs=1 gave no prompt_logprobs: {str(choice)[:300]!r}"
    assert len(entries) == len(prompt) == payload["usage"]["prompt_tokens"], (
        f"{len(entries)} prompt logprobs for {len(prompt)} prompt token ids, usage {payload['usage']['prompt_tokens']}"
    )
    # The first token has nothing before it to be predicted from; every other entry scores its prompt token.
    assert entries[0] is None, f"the first prompt token has logprobs {entries[0]}"
    unscored = [(place, token) for place, token in enumerate(prompt[1:], 1) if str(token) not in (entries[place] or {})]
    assert not unscored, f"prompt tokens (position, id) without their own logprob: {unscored}"
    vllm_evidence.judged(len(entries), "prompt tokens")


@contract("sampling.echo_returns_prompt")
def test_echo_returns_prompt(vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(complete(vllm_client, vllm_facts.model, max_tokens=4, ignore_eos=True))
    # Without return_token_ids: with it, vLLM echoes the prompt as prompt_token_ids and leaves it out of the text
    # (CompletionServing.request_output_to_completion_response, vllm/entrypoints/openai/completion/serving.py).
    fields = {"max_tokens": 4, "ignore_eos": True, "echo": True, "return_token_ids": False}
    echoed = read_completion(complete(vllm_client, vllm_facts.model, **fields))
    assert echoed.text == PROMPT + greedy.text, f"echo gave {echoed.text!r}, not the prompt then {greedy.text!r}"
    vllm_evidence.judged(1, "echoed answers")


@contract("sampling.unsupported_parameter_refused_or_declared")
def test_unsupported_parameter_refused_or_declared(vllm_client, vllm_facts, vllm_expect, vllm_evidence):
    facts = vllm_expect.release.sampling_parameters
    judged, ignored = 0, []
    for route, probes in UNSUPPORTED_PROBES.items():
        for field, value in probes.items():
            if field in facts["accepted"][route]:
                continue  # the release takes it: its effect is another suite's to judge
            response = vllm_client.post(
                PATHS[route], request_body(route, vllm_facts.model, max_tokens=2, **{field: value})
            )
            said = f"{field}={value!r} on {route}: {response.describe()} {response.text[:300]!r}"
            if response.status == 200:
                assert field in facts["ignored"][route], (
                    f"{said}: answered 200, yet the {vllm_expect.version_label} facts (sampling_parameters) neither "
                    "accept nor ignore it: silently dropped"
                )
                ignored.append(f"{field} on {route}")
            else:
                assert response.status == 400 and field in response.text, f"{said}: refused without naming it"
            judged += 1
    departure = vllm_expect.departure("sampling_parameters")
    if ignored and departure is not None:
        known_departure(departure, f"answered 200 and ignored: {', '.join(ignored)}")
    assert not ignored, f"answered 200 and ignored: {', '.join(ignored)}, and the release's facts mark no departure"
    vllm_evidence.judged(judged, "parameters", missing="the release accepts every probed parameter")


@contract("sampling.ignore_eos_runs_past_eos")
@pytest.mark.parametrize("route", ROUTES)
def test_ignore_eos_runs_past_eos(route, vllm_client, vllm_facts, vllm_evidence):
    eos, tried = end_of_sequence(vllm_client, vllm_facts.model, route)
    if eos is None:
        undecided(f"no end-of-sequence token found to force: {tried}")
    fields = {"ignore_eos": True, "max_tokens": EXACT_TOKENS, "logit_bias": {str(eos): 100}}
    answer = read_completion(ask(vllm_client, vllm_facts.model, route, **fields))
    assert (len(answer.token_ids), answer.finish_reason) == (EXACT_TOKENS, "length"), (
        f"ignore_eos with max_tokens={EXACT_TOKENS}, the end-of-sequence token {eos} forced, gave tokens "
        f"{answer.token_ids} ({answer.finish_reason}); without ignore_eos it ends at once"
    )
    vllm_evidence.judged(EXACT_TOKENS, "tokens past the end of sequence")


@contract("sampling.max_completion_tokens_bounds_chat")
def test_max_completion_tokens_bounds_chat(vllm_client, vllm_facts, vllm_evidence):
    # Alone, as OpenAI's SDK sends it: without it chat's answer runs to the rest of the context.
    fields = {"max_completion_tokens": EXACT_TOKENS, "ignore_eos": True}
    answer = read_completion(ask(vllm_client, vllm_facts.model, "chat", omit=("max_tokens",), **fields))
    assert (len(answer.token_ids), answer.completion_tokens, answer.finish_reason) == (
        EXACT_TOKENS,
        EXACT_TOKENS,
        "length",
    ), (
        f"max_completion_tokens={EXACT_TOKENS} (no max_tokens) gave {len(answer.token_ids)} token ids, "
        f"{answer.completion_tokens} by usage, finish_reason {answer.finish_reason}"
    )
    vllm_evidence.judged(EXACT_TOKENS, "tokens")


@contract("sampling.top_k_narrows")
@pytest.mark.parametrize("route", ROUTES)
def test_top_k_narrows(route, vllm_client, vllm_facts, vllm_evidence):
    problem = narrowed_problem(vllm_client, vllm_facts.model, route, top_k=1)
    assert not problem, problem
    vllm_evidence.judged(NARROW_TOKENS, "narrowed tokens")


@contract("sampling.top_p_narrows")
@pytest.mark.parametrize("route", ROUTES)
def test_top_p_narrows(route, vllm_client, vllm_facts, vllm_evidence):
    problem = narrowed_problem(vllm_client, vllm_facts.model, route, top_p=1e-6)
    assert not problem, problem
    vllm_evidence.judged(NARROW_TOKENS, "narrowed tokens")


@contract("sampling.min_p_narrows")
@pytest.mark.parametrize("route", ROUTES)
def test_min_p_narrows(route, vllm_client, vllm_facts, vllm_evidence):
    problem = narrowed_problem(vllm_client, vllm_facts.model, route, min_p=1.0)
    assert not problem, problem
    vllm_evidence.judged(NARROW_TOKENS, "narrowed tokens")


@contract("sampling.presence_penalty_breaks_repeat")
@pytest.mark.parametrize("route", ROUTES)
def test_presence_penalty_breaks_repeat(route, vllm_client, vllm_facts, vllm_evidence):
    problem = subtracted_penalty_problem(vllm_client, vllm_facts.model, route, presence_penalty=MOST_PENALTY)
    assert not problem, problem
    vllm_evidence.judged(1, "broken repeats")


@contract("sampling.frequency_penalty_breaks_repeat")
@pytest.mark.parametrize("route", ROUTES)
def test_frequency_penalty_breaks_repeat(route, vllm_client, vllm_facts, vllm_evidence):
    problem = subtracted_penalty_problem(vllm_client, vllm_facts.model, route, frequency_penalty=MOST_PENALTY)
    assert not problem, problem
    vllm_evidence.judged(1, "broken repeats")


@contract("sampling.repetition_penalty_breaks_repeat")
@pytest.mark.parametrize("route", ROUTES)
def test_repetition_penalty_breaks_repeat(route, vllm_client, vllm_facts, vllm_evidence):
    token = first_greedy_token(vllm_client, vllm_facts.model, route)
    fields = {"max_tokens": 2, "logit_bias": {str(token): FORCED}, "repetition_penalty": REPETITION_PENALTY}
    penalized = read_completion(ask(vllm_client, vllm_facts.model, route, **fields)).token_ids
    # Forced by the bias, the token's logit is positive; divided by the penalty once it has occurred, it falls below
    # the best token never seen (its raw logit, a tenth or more on any model we know), so it does not repeat.
    assert penalized != [token, token], (
        f"repetition_penalty={REPETITION_PENALTY} let {token}, forced by logit_bias +{FORCED}, repeat: {penalized}"
    )
    vllm_evidence.judged(1, "broken repeats")


@contract("sampling.responses_instructions_reach_prompt")
def test_responses_instructions_reach_prompt(vllm_client, vllm_facts, vllm_evidence):
    without, with_ = added_prompt_tokens(vllm_client, vllm_facts.model, "responses", instructions=INSTRUCTIONS)
    assert isinstance(without, int) and isinstance(with_, int) and with_ > without, (
        f"Responses' input_tokens without and with instructions {INSTRUCTIONS!r}: {without}, {with_}"
    )
    vllm_evidence.judged(with_ - without, "instruction tokens")


@contract("sampling.responses_max_output_tokens_bounds")
def test_responses_max_output_tokens_bounds(vllm_client, vllm_facts, vllm_evidence):
    payload = ask(vllm_client, vllm_facts.model, "responses", max_output_tokens=EXACT_TOKENS)
    produced = (payload.get("usage") or {}).get("output_tokens")
    assert isinstance(produced, int) and produced <= EXACT_TOKENS, (
        f"max_output_tokens={EXACT_TOKENS} gave {produced} output tokens (status {payload.get('status')})"
    )
    if produced == EXACT_TOKENS:
        reason = (payload.get("incomplete_details") or {}).get("reason")
        assert (payload.get("status"), reason) == ("incomplete", "max_output_tokens"), (
            f"cut at max_output_tokens={EXACT_TOKENS}, the answer says status {payload.get('status')}, reason {reason}"
        )
    vllm_evidence.judged(produced, "output tokens")


@contract("sampling.messages_system_reaches_prompt")
def test_messages_system_reaches_prompt(vllm_client, vllm_facts, vllm_evidence):
    without, with_ = added_prompt_tokens(vllm_client, vllm_facts.model, "messages", system=INSTRUCTIONS)
    assert isinstance(without, int) and isinstance(with_, int) and with_ > without, (
        f"Anthropic's input tokens (the cached ones added back) without and with system {INSTRUCTIONS!r}: "
        f"{without}, {with_}"
    )
    vllm_evidence.judged(with_ - without, "system tokens")


@contract("sampling.messages_stop_sequences_end_answer")
def test_messages_stop_sequences_end_answer(vllm_client, vllm_facts, vllm_evidence):
    # Greedy two ways (temperature 0 and top_k 1), so that the stop is judged on the greedy answer alone.
    def text(**fields):
        payload = ask(vllm_client, vllm_facts.model, "messages", top_k=1, **fields)
        return payload, MESSAGES.text(payload) or ""

    _, greedy = text()
    candidate = stop_candidate(greedy)
    if candidate is None:
        undecided(f"the greedy answer {greedy!r} has no stop sequence to take from its middle")
    stop, before = candidate
    payload, cut = text(stop_sequences=[stop])
    said = (cut, payload.get("stop_reason"), payload.get("stop_sequence"))
    assert said == (before, "stop_sequence", stop), (
        f"stop_sequences=[{stop!r}] gave {said}, not the greedy answer {greedy!r} up to it, stop_sequence, {stop!r}"
    )
    vllm_evidence.judged(1, "stopped answers")


@contract("sampling.messages_temperature_zero_is_greedy")
def test_messages_temperature_zero_is_greedy(vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(
        ask(vllm_client, vllm_facts.model, "chat", max_tokens=NARROW_TOKENS, **sampled_logprobs("chat"))
    )
    chance = collision_chance(greedy.logprobs)
    if chance is None or chance > SEED_COLLISION_BOUND:
        undecided(
            f"a sample at temperature 1 repeats the greedy tokens with chance {chance}: temperature 0 shows nothing"
        )
    # The same conversation through Anthropic's API: the same rendered prompt, so the same greedy text.
    text = MESSAGES.text(ask(vllm_client, vllm_facts.model, "messages", max_tokens=NARROW_TOKENS))
    assert text == greedy.text, (
        f"temperature 0 on /v1/messages gave {text!r}, not chat's greedy answer to the same conversation "
        f"{greedy.text!r} (a sample repeats it with chance {chance:.1e})"
    )
    vllm_evidence.judged(NARROW_TOKENS, "greedy tokens")
