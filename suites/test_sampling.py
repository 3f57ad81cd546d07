"""Sampling parameters: what a request asks for, it gets, judged by the effect on the server's own answer.

An upgrade that renames or drops a request parameter rarely fails: vLLM
ignores what it does not know and the answer looks fine. Our models have
random weights, so each check compares against the server's own greedy or
seeded answer to the same prompt (features/sampling.py); a model whose answer
cannot show the effect (no stop string to take) is undecided, never failed.
"""

from pytest_vllm_conformance import contract, undecided
from pytest_vllm_conformance.features.sampling import (
    SEED_COLLISION_BOUND,
    collision_chance,
    completion_body,
    first_new_token,
    read_completion,
    stop_candidate,
)

N_CHOICES = 3
EXACT_TOKENS = 8
TOP_LOGPROBS = 3


def complete(client, model, **fields):
    response = client.post("/v1/completions", completion_body(model, **fields))
    assert response.status == 200, f"{fields} was not served: {response.describe()} {response.text[:300]!r}"
    return response.json()


@contract("sampling.n_gives_n_choices")
def test_n_gives_n_choices(vllm_client, vllm_facts, vllm_evidence):
    payload = complete(vllm_client, vllm_facts.model, n=N_CHOICES, temperature=1, max_tokens=4)
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
    vllm_evidence.judged(EXACT_TOKENS, "tokens")


@contract("sampling.stop_string_ends_answer")
def test_stop_string_ends_answer(vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(complete(vllm_client, vllm_facts.model, ignore_eos=True))
    candidate = stop_candidate(greedy.text)
    if candidate is None:
        undecided(f"the greedy answer {greedy.text!r} has no stop string to take from its middle")
    stop, before = candidate
    cut = read_completion(complete(vllm_client, vllm_facts.model, ignore_eos=True, stop=[stop]))
    assert (cut.text, cut.finish_reason) == (before, "stop"), (
        f"stop={stop!r} gave {cut.text!r} ({cut.finish_reason}), not the greedy answer up to it: {before!r} (stop)"
    )
    assert cut.stop_reason == stop, f"stop_reason {cut.stop_reason!r}, not the stop string {stop!r}"
    kept = read_completion(
        complete(vllm_client, vllm_facts.model, ignore_eos=True, stop=[stop], include_stop_str_in_output=True)
    )
    assert kept.text == before + stop, f"include_stop_str_in_output gave {kept.text!r}, not {before + stop!r}"
    vllm_evidence.judged(2, "stopped answers")


@contract("sampling.stop_token_id_ends_answer")
def test_stop_token_id_ends_answer(vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(complete(vllm_client, vllm_facts.model, ignore_eos=True))
    found = first_new_token(greedy.token_ids, 2)
    if found is None:
        undecided(f"the greedy tokens {greedy.token_ids} repeat from the third on: no stop token to take")
    token, position = found
    cut = read_completion(complete(vllm_client, vllm_facts.model, ignore_eos=True, stop_token_ids=[token]))
    assert cut.token_ids[:position] == greedy.token_ids[:position] and len(cut.token_ids) <= position + 1, (
        f"stop_token_ids=[{token}] gave tokens {cut.token_ids}, not the greedy {greedy.token_ids} up to position "
        f"{position}"
    )
    assert (cut.finish_reason, cut.stop_reason) == ("stop", token), (
        f"finish_reason {cut.finish_reason}, stop_reason {cut.stop_reason!r}; expected stop, {token}"
    )
    vllm_evidence.judged(1, "stopped answers")


@contract("sampling.min_tokens_holds_back_stop")
def test_min_tokens_holds_back_stop(vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(complete(vllm_client, vllm_facts.model, ignore_eos=True))
    found = first_new_token(greedy.token_ids, 1)
    if found is None:
        undecided(f"the greedy tokens {greedy.token_ids} are one token repeated: no stop token to take")
    token, position = found
    least = position + 3
    held = read_completion(
        complete(vllm_client, vllm_facts.model, stop_token_ids=[token], min_tokens=least, max_tokens=least + 2)
    )
    assert len(held.token_ids) >= least and token not in held.token_ids[:least], (
        f"min_tokens={least} with stop_token_ids=[{token}] (greedy position {position}) gave {held.token_ids}"
    )
    vllm_evidence.judged(1, "held answers")


@contract("sampling.seed_reproducible")
def test_seed_reproducible(vllm_client, vllm_facts, vllm_evidence):
    def sample(seed):
        fields = {"temperature": 1, "seed": seed, "ignore_eos": True, "logprobs": 0}
        return read_completion(complete(vllm_client, vllm_facts.model, **fields))

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
def test_logit_bias_forces_token(vllm_client, vllm_facts, vllm_evidence):
    greedy = read_completion(complete(vllm_client, vllm_facts.model, ignore_eos=True, max_tokens=4))
    token = next(t for t in (greedy.token_ids[-1], greedy.token_ids[0] + 1) if t != greedy.token_ids[0])
    biased = read_completion(
        complete(vllm_client, vllm_facts.model, ignore_eos=True, max_tokens=4, logit_bias={str(token): 100})
    )
    assert biased.token_ids == [token] * 4, f"logit_bias +100 on {token} gave {biased.token_ids}"
    vllm_evidence.judged(4, "biased tokens")


@contract("sampling.logprobs_as_asked")
def test_logprobs_as_asked(vllm_client, vllm_facts, vllm_evidence):
    body = {"model": vllm_facts.model, "messages": [{"role": "user", "content": "Then"}], "max_tokens": 4}
    body |= {"temperature": 0, "logprobs": True, "top_logprobs": TOP_LOGPROBS}
    response = vllm_client.post("/v1/chat/completions", body)
    assert response.status == 200, f"logprobs were not served: {response.describe()} {response.text[:300]!r}"
    positions = (response.json()["choices"][0].get("logprobs") or {}).get("content") or []
    assert positions, f"logprobs=true, top_logprobs={TOP_LOGPROBS} gave no logprobs: {response.text[:300]!r}"
    for place, position in enumerate(positions):
        values = [entry["logprob"] for entry in position["top_logprobs"]]
        tokens = [entry["token"] for entry in position["top_logprobs"]]
        where = f"position {place}: {position['token']!r} among {list(zip(tokens, values, strict=True))}"
        assert len(values) == TOP_LOGPROBS, f"{len(values)} top logprobs, not {TOP_LOGPROBS}, at {where}"
        assert values == sorted(values, reverse=True) and all(v <= 0 for v in values), f"not sorted, <= 0 at {where}"
        assert position["token"] in tokens, f"the greedy token is not among its top logprobs at {where}"
    vllm_evidence.judged(len(positions), "positions")
