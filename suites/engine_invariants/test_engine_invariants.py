"""The engine's invariants: a greedy answer is the same from the prefix cache, inside a burst, and after a cancel.

Each check compares the server's greedy answer with itself (invariance.py, protocol/greedy_answers.py), so random
weights do not matter. A divergence at a near-tie is undecided, never failed; a cache hit or a freed slot
is proven from the server's own counters and gauges on /metrics, or the check is undecided, naming why.
"""

import pytest

from pytest_vllm_conformance import contract, undecided
from pytest_vllm_conformance.catalogue.applicability import MOST_PREEMPTION_REQUESTS
from pytest_vllm_conformance.protocol import prometheus
from pytest_vllm_conformance.protocol.greedy_answers import divergence, mean_logprob_drift

from .invariance import (
    CACHED_PROMPT_TOKENS,
    PREEMPTION_PROMPT_TOKENS,
    cancel_mid_stream,
    counted_hits,
    greedy,
    in_a_burst,
    kv_cache,
    long_answer_tokens,
    metric_names,
    preemption_load,
    token_prompt,
    under_preemption,
)


@pytest.fixture
def engine_alone(vllm_exclusive):
    """No other test talks to the server meanwhile: the counters, the gauge and the burst are this test's own."""
    with vllm_exclusive():
        yield


def judge_same(first, second, gap, what):
    """Fails on a divergence that is not a near-tie; undecided on one that is."""
    parted = divergence(first, second, gap)
    if parted is not None and parted.near_tie:
        undecided(f"{what}: {parted}")
    assert parted is None, f"{what}: {parted}"


@contract("engine_invariants.prefix_cache_hit_keeps_answer")
def test_prefix_cache_hit_keeps_answer(engine_alone, vllm_client, vllm_facts, vllm_expect, vllm_evidence):
    prompt = token_prompt(CACHED_PROMPT_TOKENS, fresh=True)

    def send():
        return greedy(vllm_client, vllm_facts.model, prompt)

    cold, _, _ = counted_hits(vllm_client, vllm_expect, send)  # waits for the cold run's lookup to be counted
    hit, counted, problem = counted_hits(vllm_client, vllm_expect, send)
    if not (counted or hit.cached_tokens):
        undecided(
            f"no prefix-cache hit proven for a {len(prompt)}-token prompt sent twice: hits counted {counted} "
            f"{problem}, cached_tokens {hit.cached_tokens} (sent with --enable-prompt-tokens-details)"
        )
    gap = vllm_expect.declared("engine_invariants", "near_tie_gap").value
    judge_same(cold, hit, gap, f"the cold run against its prefix-cache hit ({counted} tokens counted as hits)")
    floor = vllm_expect.declared("engine_invariants", "max_mean_logprob_drift").value
    drift = mean_logprob_drift(cold, hit)
    assert drift is not None, f"no logprobs to compare: cold {cold.top[:1]}, hit {hit.top[:1]}"
    assert drift <= floor, f"the hit's logprobs moved by {drift:.4f} on average from the cold run's (floor {floor})"
    vllm_evidence.judged(len(hit.token_ids), "tokens of a proven hit")


@contract("engine_invariants.batch_invariant_greedy")
def test_batch_invariant_greedy(engine_alone, vllm_client, vllm_facts, vllm_expect, vllm_evidence):
    prompt = token_prompt(24, fresh=True)
    alone = greedy(vllm_client, vllm_facts.model, prompt)
    tokens = long_answer_tokens(vllm_facts.max_model_len)
    inside, overlapping = in_a_burst(vllm_client, vllm_facts.model, prompt, tokens)
    if not overlapping:
        undecided("no other request of the burst was still decoding when the answer came back")
    gap = vllm_expect.declared("engine_invariants", "near_tie_gap").value
    judge_same(alone, inside, gap, f"alone against beside {overlapping} decoding requests")
    vllm_evidence.judged(len(inside.token_ids), "tokens inside a burst")


@contract("engine_invariants.cancel_frees_slot")
def test_cancel_frees_slot(engine_alone, vllm_client, vllm_facts, vllm_expect, vllm_evidence):
    prompt = token_prompt(24, fresh=True)
    before = greedy(vllm_client, vllm_facts.model, prompt)
    tokens = long_answer_tokens(vllm_facts.max_model_len)
    cancelled = cancel_mid_stream(vllm_client, vllm_expect, vllm_facts.model, prompt, tokens)
    if cancelled.level is None or cancelled.ended_by_itself or not (cancelled.while_streaming or 0) > cancelled.level:
        undecided(f"the cancelled stream was not seen running: {cancelled}")
    assert cancelled.freed_after is not None, f"the slot was not freed after the hang-up: {cancelled}"
    assert cancelled.generated is not None and cancelled.generated < tokens, (
        f"the hang-up never reached the engine: it generated {cancelled.generated} tokens (vllm:generation_tokens), "
        f"the whole {tokens}-token answer, so the slot was freed by an answer run to its end, not by an abort: "
        f"{cancelled}"
    )
    after = greedy(vllm_client, vllm_facts.model, prompt)
    gap = vllm_expect.declared("engine_invariants", "near_tie_gap").value
    judge_same(before, after, gap, f"before against after a cancelled stream (freed in {cancelled.freed_after:.2f} s)")
    vllm_evidence.judged(1, "cancelled streams")


@contract("engine_invariants.preempted_answer_unchanged")
def test_preempted_answer_unchanged(engine_alone, vllm_client, vllm_facts, vllm_expect, vllm_evidence):
    tokens = long_answer_tokens(vllm_facts.max_model_len)
    request_tokens = PREEMPTION_PROMPT_TOKENS + tokens
    cache = kv_cache(prometheus.read(vllm_client, vllm_expect.release.metrics_path), vllm_expect)
    load = preemption_load(cache, request_tokens)
    if load is None:
        undecided(
            f"no preemption could be caused at this load: the KV cache holds {cache.described}, room for "
            f"{MOST_PREEMPTION_REQUESTS} requests of {request_tokens} tokens at once"
        )
    prompts = [token_prompt(PREEMPTION_PROMPT_TOKENS, fresh=True) for _ in range(load)]
    run = under_preemption(vllm_client, vllm_expect, vllm_facts.model, prompts, tokens)
    at_load = f"{load} requests of {request_tokens} tokens at once, the KV cache holding {cache.described}"
    if run.preempted_together is None:
        undecided(f"the preemption counter was not read: {run.problem}")
    if run.preempted_alone:
        undecided(f"the answers sent one by one were preempted too ({run.preempted_alone:g}): no baseline")
    if not run.preempted_together:
        counter = metric_names(vllm_expect)["preemptions"]
        undecided(f"no preemption could be caused at this load: {counter} did not rise with {at_load}")
    gap = vllm_expect.declared("engine_invariants", "near_tie_gap").value
    what = f"alone against under {run.preempted_together:g} preemptions ({at_load})"
    parted = [
        (index, found)
        for index, (alone, together) in enumerate(zip(run.alone, run.together, strict=True))
        if (found := divergence(alone, together, gap)) is not None
    ]
    broken = [f"request {index + 1}: {found}" for index, found in parted if not found.near_tie]
    assert not broken, f"{what}: {'; '.join(broken)}"
    if parted:
        undecided(f"{what}: " + "; ".join(f"request {index + 1}: {found}" for index, found in parted))
    vllm_evidence.judged(load, "answers of a load the server preempted")
