"""Pooling answers: a pooling server's vectors and scores, each asked for two ways and compared.

RAG stacks embed, score and rerank through vLLM, and what breaks them on an
upgrade or behind a gateway is silent: a base64 vector that decodes to
something else, a batch answered out of order, ``dimensions`` or
``truncate_prompt_tokens`` dropped on the way, a reranking that is not
sorted or not the scores' (vllm-project/vllm#21681, #20794). Each check
compares the server with itself, so it holds for whatever model it serves;
the tolerances are the profile's (``pooling.min_cosine``,
``pooling.score_tolerance``, ``pooling.probability_tolerance``), what a
release refuses and how it classifies its facts'. One check compares the
server with a baseline server instead (``--vllm-baseline-url``): its
vectors, input by input, within ``pooling.drift_min_cosine``.
"""

import pytest

from pytest_vllm_conformance import contract, undecided
from pytest_vllm_conformance.connection.live_baseline import BaselineUnusable, connect_baseline
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids

from .embedding_drift import Side, embedding_drift
from .pooled_answers import (
    EMBEDDINGS,
    TEXTS,
    Checked,
    Tolerances,
    base64_matches_float,
    batch_matches_alone,
    classify_probabilities,
    dimensions_as_declared,
    removed_fields_refused,
    rerank_ranked,
    score_is_embedding_cosine,
    score_matches_pairs,
    truncate_prompt_tokens_honoured,
)


def settle(checked: Checked) -> None:
    if checked.undecided:
        undecided(checked.undecided)
    assert not checked.problems, "; ".join(checked.problems)


@contract("pooling.base64_matches_float")
def test_base64_matches_float(vllm_client, vllm_facts, vllm_expect):
    settle(base64_matches_float(vllm_client, vllm_facts.model, Tolerances.of(vllm_expect)))


@contract("pooling.batch_matches_alone")
def test_batch_matches_alone(vllm_client, vllm_facts, vllm_expect):
    settle(batch_matches_alone(vllm_client, vllm_facts.model, Tolerances.of(vllm_expect)))


@contract("pooling.dimensions_as_declared")
def test_dimensions_as_declared(vllm_client, vllm_facts, vllm_expect):
    matryoshka = vllm_expect.declared("pooling", "matryoshka").value
    tolerances, refusal = Tolerances.of(vllm_expect), vllm_expect.fact("embedding_dimensions")
    settle(dimensions_as_declared(vllm_client, vllm_facts.model, tolerances, matryoshka, refusal))


@contract("pooling.truncate_prompt_tokens_honoured")
def test_truncate_prompt_tokens_honoured(vllm_client, vllm_facts, vllm_expect):
    settle(truncate_prompt_tokens_honoured(vllm_client, vllm_facts.model, Tolerances.of(vllm_expect)))


@contract("pooling.score_is_embedding_cosine")
def test_score_is_embedding_cosine(vllm_client, vllm_facts, vllm_expect):
    settle(score_is_embedding_cosine(vllm_client, vllm_facts.model, Tolerances.of(vllm_expect)))


@contract("pooling.rerank_ranked")
def test_rerank_ranked(vllm_client, vllm_facts, vllm_expect):
    aliases = vllm_expect.fact("scoring_routes")["rerank_aliases"]
    settle(rerank_ranked(vllm_client, vllm_facts.model, Tolerances.of(vllm_expect), aliases))


@contract("pooling.usage_counts_inputs")
def test_usage_counts_inputs(vllm_client, vllm_facts):
    try:
        lengths = [len(token_ids(vllm_client, vllm_facts.model, prompt=text)) for text in TEXTS]
    except TokenizeUnavailable as exc:
        undecided(f"the texts' token counts are unknown: {exc}")
    answer = vllm_client.post(EMBEDDINGS, {"model": vllm_facts.model, "input": list(TEXTS)})
    usage = (answer.json_or_none() or {}).get("usage") if answer.status == 200 else None
    assert isinstance(usage, dict), f"POST {EMBEDDINGS} of {len(TEXTS)} texts answered no usage: {answer.describe()}"
    counted = {key: usage.get(key) for key in ("prompt_tokens", "total_tokens")}
    assert counted == dict.fromkeys(counted, sum(lengths)), (
        f"usage {counted} for {len(TEXTS)} texts whose /tokenize lengths {lengths} add up to {sum(lengths)}"
    )


@contract("pooling.score_matches_pairs")
def test_score_matches_pairs(vllm_client, vllm_facts, vllm_expect):
    settle(score_matches_pairs(vllm_client, vllm_facts.model, Tolerances.of(vllm_expect)))


@contract("pooling.classify_probabilities")
def test_classify_probabilities(vllm_client, vllm_facts, vllm_expect):
    activation = vllm_expect.fact("classify_activation")
    tolerance = float(vllm_expect.declared("pooling", "probability_tolerance").value)
    settle(classify_probabilities(vllm_client, vllm_facts.model, Tolerances.of(vllm_expect), activation, tolerance))


@contract("pooling.removed_fields_refused")
def test_removed_fields_refused(vllm_client, vllm_facts, vllm_expect):
    settle(removed_fields_refused(vllm_client, vllm_facts.model, vllm_expect.fact("removed_pooling_parameters")))


@pytest.fixture(scope="module")
def embedding_baseline(vllm_settings, vllm_facts):
    """The live baseline (--vllm-baseline-url); a failure where it was given but cannot be reached."""
    try:
        live = connect_baseline(vllm_settings, vllm_facts)
    except BaselineUnusable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield live
    live.client.close()


@contract("pooling.embedding_drift_within_floor")
def test_embedding_drift_within_floor(vllm_client, vllm_facts, vllm_expect, vllm_settings, embedding_baseline):
    if vllm_settings.baseline_url.rstrip("/") == vllm_facts.url.rstrip("/"):
        undecided("--vllm-baseline-url is the target itself: a server compared with itself passes whatever it is")
    floor = float(vllm_expect.declared("pooling", "drift_min_cosine").value)
    target = Side(vllm_client, vllm_facts.model)
    baseline = Side(embedding_baseline.client, embedding_baseline.facts.model)
    settle(embedding_drift(target, baseline, floor, model_named=bool(vllm_settings.baseline_model)))
