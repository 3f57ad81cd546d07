"""The sampling suite FAILS the one contract whose parameter a proxy drops from requests, on a real server.

The fault proxy in front of the plain server (fixtures/server_specs.py) strips
one request field; the contract judged by that field's effect must fail, every
other one keeps its healthy verdict (the seed contract reads logprobs for its
collision bound, so without them it is undecided, not failed). A
response cache that ignores the seed fails the seed contract.
"""

import pytest

from fixtures.fault_proxy import CacheIgnoringField, FaultProxy, RewriteJsonResponse, StripJsonField
from fixtures.verdicts import assert_verdicts
from tests.conftest import requires_vllm, run_suites

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("plain")]

SAMPLING_CONTRACTS = (
    "n_gives_n_choices",
    "max_tokens_exact_with_ignore_eos",
    "stop_string_ends_answer",
    "stop_token_id_ends_answer",
    "min_tokens_holds_back_stop",
    "seed_reproducible",
    "logit_bias_forces_token",
    "logprobs_as_asked",
)
HEALTHY = {f"sampling.{name}": {"passed": 1} for name in SAMPLING_CONTRACTS}
# field dropped -> the contracts whose verdict it changes
FAULTS = {
    "n": {"sampling.n_gives_n_choices": {"failed": 1}},
    "stop": {"sampling.stop_string_ends_answer": {"failed": 1}},
    "min_tokens": {"sampling.min_tokens_holds_back_stop": {"failed": 1}},
    "seed": {"sampling.seed_reproducible": {"failed": 1}},
    "logit_bias": {"sampling.logit_bias_forces_token": {"failed": 1}},
    "logprobs": {"sampling.logprobs_as_asked": {"failed": 1}, "sampling.seed_reproducible": {"undecided": 1}},
}


# The healthy verdicts are pinned by the whole-suite run on plain (tests/integration/test_suites_on_real_vllm.py).
def _failing(field):
    return {contract for contract, counts in FAULTS[field].items() if "failed" in counts}


@pytest.mark.parametrize(
    "field", [pytest.param(field, marks=pytest.mark.pins(failed=_failing(field))) for field in FAULTS]
)
def test_a_dropped_parameter_fails_its_contract(pytester, plain_server, field):
    with FaultProxy(plain_server.url, rules=[StripJsonField(field=field)]) as proxy:
        run_suites(pytester, "-m", "sampling", url=proxy.url)
        assert all(proxy.hits), f"the fault was never injected: {proxy.hits}"
    assert_verdicts(pytester.path / "junit.xml", HEALTHY | FAULTS[field])


STOP_TOKEN_AND_COUNT = {
    "sampling.max_tokens_exact_with_ignore_eos": {"failed": 1},
    "sampling.stop_token_id_ends_answer": {"failed": 1},
    "sampling.min_tokens_holds_back_stop": {"failed": 1},  # its stop token is a stop_token_ids entry too
}


@pytest.mark.pins(failed=set(STOP_TOKEN_AND_COUNT))
def test_a_stop_token_dropped_and_a_token_count_one_over_fail_their_contracts(pytester, plain_server):
    # The answers' token count one over what was generated (as a relay that re-tokenizes would count), and
    # stop_token_ids dropped on the way.
    rules = [
        RewriteJsonResponse(json_path=("usage", "completion_tokens"), value=lambda n: n + 1, path="/v1/completions"),
        StripJsonField(field="stop_token_ids"),
    ]
    with FaultProxy(plain_server.url, rules=rules) as proxy:
        run_suites(pytester, "-m", "sampling", url=proxy.url)
        assert all(proxy.hits), f"the fault was never injected: {proxy.hits}"
    assert_verdicts(pytester.path / "junit.xml", HEALTHY | STOP_TOKEN_AND_COUNT)


@pytest.mark.pins(failed={"sampling.seed_reproducible"})
def test_a_cache_that_ignores_the_seed_fails_the_seed_contract(pytester, plain_server):
    # Every other request differs from the earlier ones by more than its seed (or is greedy, where the earlier
    # answer is the right one), so only the seed contract sees the cached answer.
    with FaultProxy(plain_server.url, rules=[CacheIgnoringField("seed", path="/v1/completions")]) as proxy:
        run_suites(pytester, "-m", "sampling", url=proxy.url)
        assert all(proxy.hits), f"no answer came from the cache: {proxy.hits}"
    assert_verdicts(pytester.path / "junit.xml", HEALTHY | {"sampling.seed_reproducible": {"failed": 1}})
