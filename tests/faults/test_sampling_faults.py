"""The sampling suite FAILS the one contract whose parameter a proxy drops from requests, on a real server.

The fault proxy in front of the plain server (fixtures/server_specs.py) strips
one request field; the contract judged by that field's effect must fail, every
other one keeps its healthy verdict (the seed contract reads logprobs for its
collision bound, so without them it is undecided, not failed). A
response cache that ignores the seed fails the seed contract; a gateway's
refusal of an unsupported parameter that does not name it fails the
unsupported-parameter contract. One relay dropping the rest of the parameters
(ignore_eos, max_completion_tokens, top_k, top_p, min_p, the penalties,
Responses' instructions and max_output_tokens, Anthropic's system,
stop_sequences and temperature) fails each of their contracts. The last test
is the healthy pin on the model of another seed (the padding server).
"""

import re

import pytest

from fixtures.fault_proxy import (
    CacheIgnoringField,
    FaultProxy,
    RefuseJsonFields,
    RewriteJsonResponse,
    RewriteStream,
    StripJsonField,
)
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from tests.conftest import requires_vllm, run_suites

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("plain")]

SAMPLING_CONTRACTS = (
    "max_tokens_exact_with_ignore_eos",
    "prompt_logprobs_per_prompt_token",
    "echo_returns_prompt",
)
# Every release answers the probes 200 and ignores them (sampling_parameters): its known departure.
UNSUPPORTED = "sampling.unsupported_parameter_refused_or_declared"
# Judged on completions and on chat.
ON_BOTH_ROUTES = (
    "n_gives_n_choices",
    "stop_string_ends_answer",
    "logprobs_as_asked",
    "stop_token_id_ends_answer",
    "min_tokens_holds_back_stop",
    "seed_reproducible",
    "logit_bias_forces_token",
    "allowed_token_ids_keep_inside",
    "bad_words_keep_outside",
)
# The rest of the parameters (issue 51): ignore_eos, max_completion_tokens, top_k, top_p, min_p, the penalties,
# Responses' and Anthropic's own. Their requests carry none of the fields the single-field faults below drop but
# logit_bias and logprobs, so only those runs judge them too: a relay cannot change a request by a field it lacks.
REST_ONCE = (
    "max_completion_tokens_bounds_chat",
    "responses_instructions_reach_prompt",
    "responses_max_output_tokens_bounds",
    "messages_system_reaches_prompt",
    "messages_stop_sequences_end_answer",
    "messages_temperature_zero_is_greedy",
)
REST_ON_BOTH_ROUTES = (
    "ignore_eos_runs_past_eos",
    "top_k_narrows",
    "top_p_narrows",
    "min_p_narrows",
    "presence_penalty_breaks_repeat",
    "frequency_penalty_breaks_repeat",
    "repetition_penalty_breaks_repeat",
)
SENT_BY_THE_REST = ("logit_bias", "logprobs")
WITHOUT_THE_REST = ("-k", "not (" + " or ".join(REST_ONCE + REST_ON_BOTH_ROUTES) + ")")
HEALTHY_BEFORE_THE_REST = (
    {f"sampling.{name}": {"passed": 1} for name in SAMPLING_CONTRACTS}
    | {f"sampling.{name}": {"passed": 2} for name in ON_BOTH_ROUTES}
    | {UNSUPPORTED: {"known departure": 1}}
)
HEALTHY = (
    HEALTHY_BEFORE_THE_REST
    | {f"sampling.{name}": {"passed": 1} for name in REST_ONCE}
    | {f"sampling.{name}": {"passed": 2} for name in REST_ON_BOTH_ROUTES}
)
# field dropped -> the contracts whose verdict it changes
FAULTS = {
    "n": {"sampling.n_gives_n_choices": {"failed": 2}},
    "stop": {"sampling.stop_string_ends_answer": {"failed": 2}},
    "min_tokens": {"sampling.min_tokens_holds_back_stop": {"failed": 2}},
    "seed": {"sampling.seed_reproducible": {"failed": 2}},
    "logit_bias": {
        "sampling.logit_bias_forces_token": {"failed": 2},
        # the end-of-sequence token is found, and the penalties' repeat made, by logit_bias: nothing to judge
        "sampling.ignore_eos_runs_past_eos": {"undecided": 2},
        "sampling.presence_penalty_breaks_repeat": {"undecided": 2},
        "sampling.frequency_penalty_breaks_repeat": {"undecided": 2},
    },
    "logprobs": {
        "sampling.logprobs_as_asked": {"failed": 2},
        # each reads logprobs for its collision bound, or for the lead a penalty must undo
        "sampling.seed_reproducible": {"undecided": 2},
        "sampling.top_k_narrows": {"undecided": 2},
        "sampling.top_p_narrows": {"undecided": 2},
        "sampling.min_p_narrows": {"undecided": 2},
        # chat's top_logprobs without logprobs is refused, as logprobs_as_asked's request is
        "sampling.presence_penalty_breaks_repeat": {"undecided": 1, "failed": 1},
        "sampling.frequency_penalty_breaks_repeat": {"undecided": 1, "failed": 1},
        "sampling.messages_temperature_zero_is_greedy": {"undecided": 1},
        # its bad word is taken from the greedy tokens' texts, which come with logprobs
        "sampling.bad_words_keep_outside": {"undecided": 2},
    },
    "allowed_token_ids": {"sampling.allowed_token_ids_keep_inside": {"failed": 2}},
    "bad_words": {"sampling.bad_words_keep_outside": {"failed": 2}},
    "prompt_logprobs": {"sampling.prompt_logprobs_per_prompt_token": {"failed": 1}},
    "echo": {"sampling.echo_returns_prompt": {"failed": 1}},
}


# The healthy verdicts are pinned by the whole-suite run on plain (tests/integration/test_suites_on_real_vllm.py).
def _failing(field):
    return {contract for contract, counts in FAULTS[field].items() if "failed" in counts}


@pytest.mark.parametrize(
    "field", [pytest.param(field, marks=pytest.mark.pins(failed=_failing(field))) for field in FAULTS]
)
def test_a_dropped_parameter_fails_its_contract(pytester, plain_server, field):
    judged = () if field in SENT_BY_THE_REST else WITHOUT_THE_REST
    with FaultProxy(plain_server.url, rules=[StripJsonField(field=field)]) as proxy:
        run_suites(pytester, "-m", "sampling", *judged, url=proxy.url)
        assert all(proxy.hits), f"the fault was never injected: {proxy.hits}"
    healthy = HEALTHY if field in SENT_BY_THE_REST else HEALTHY_BEFORE_THE_REST
    assert_verdicts(pytester.path / "junit.xml", healthy | FAULTS[field])


# The rest of the parameters, each dropped by one relay: on completions and chat (OpenAI's names), on Responses,
# and on Anthropic's messages (whose temperature alone: chat's greedy requests rely on theirs). Each contract judged
# by a dropped field's effect fails; the rest keep their healthy verdicts.
DROPPED_BY_ROUTE = {
    "/v1/(chat/)?completions": (
        "ignore_eos",
        "max_completion_tokens",
        "top_k",
        "top_p",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
    ),
    "/v1/responses": ("instructions", "max_output_tokens"),
    "/v1/messages": ("system", "stop_sequences", "temperature"),
}
REST_DROPPED = {f"sampling.{name}": {"failed": 1} for name in REST_ONCE} | {
    f"sampling.{name}": {"failed": 2} for name in REST_ON_BOTH_ROUTES
}


@pytest.mark.pins(failed=set(REST_DROPPED))
def test_the_rest_of_the_parameters_dropped_fail_their_contracts(pytester, plain_server):
    rules = [StripJsonField(field=field, path=path) for path, fields in DROPPED_BY_ROUTE.items() for field in fields]
    with FaultProxy(plain_server.url, rules=rules) as proxy:
        run_suites(pytester, "-m", "sampling", url=proxy.url)
        assert all(proxy.hits), f"the fault was never injected: {proxy.hits}"
    assert_verdicts(pytester.path / "junit.xml", HEALTHY | REST_DROPPED)


STOP_TOKEN_AND_COUNT = {
    "sampling.max_tokens_exact_with_ignore_eos": {"failed": 1},
    "sampling.stop_token_id_ends_answer": {"failed": 2},
    "sampling.min_tokens_holds_back_stop": {"failed": 2},  # its stop token is a stop_token_ids entry too
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
        run_suites(pytester, "-m", "sampling", *WITHOUT_THE_REST, url=proxy.url)
        assert all(proxy.hits), f"the fault was never injected: {proxy.hits}"
    assert_verdicts(pytester.path / "junit.xml", HEALTHY_BEFORE_THE_REST | STOP_TOKEN_AND_COUNT)


@pytest.mark.pins(failed={"sampling.seed_reproducible"})
def test_a_cache_that_ignores_the_seed_fails_the_seed_contract(pytester, plain_server):
    # Every other request differs from the earlier ones by more than its seed (or is greedy, where the earlier
    # answer is the right one), so only the seed contract sees the cached answer.
    rule = CacheIgnoringField("seed", path="/v1/(chat/)?completions")
    with FaultProxy(plain_server.url, rules=[rule]) as proxy:
        run_suites(pytester, "-m", "sampling", *WITHOUT_THE_REST, url=proxy.url)
        assert all(proxy.hits), f"no answer came from the cache: {proxy.hits}"
    expected = HEALTHY_BEFORE_THE_REST | {"sampling.seed_reproducible": {"failed": 2}}
    assert_verdicts(pytester.path / "junit.xml", expected)


@pytest.mark.pins(failed={"sampling.max_tokens_exact_with_ignore_eos"})
def test_streamed_chunks_dropped_fail_the_exact_token_count(pytester, plain_server):
    # A lossy relay: every other chunk with generated tokens lost, the usage chunk kept (it still says 8). Merged
    # chunks are no fault: vLLM itself merges the outputs its API server has not sent yet.
    rule = RewriteStream(path="/v1/completions", edit="drop_every_other_text")
    with FaultProxy(plain_server.url, rules=[rule]) as proxy:
        run_suites(pytester, "-m", "sampling", "-k", "max_tokens", url=proxy.url)
        assert all(proxy.hits), f"the fault was never injected: {proxy.hits}"
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, {"sampling.max_tokens_exact_with_ignore_eos": "failed"})
    said = failed_checks(junit)["sampling.max_tokens_exact_with_ignore_eos"]
    # How many are lost depends on how vLLM grouped the tokens into chunks; fewer than 8 arrive.
    lost = re.search(r"max_tokens=8 with ignore_eos streamed (\d+) token ids in \d+ chunks", said)
    assert lost and int(lost.group(1)) < 8, said


@pytest.mark.pins(failed={UNSUPPORTED}, healthy={UNSUPPORTED})
def test_an_unsupported_parameter_refused_without_its_name_fails_and_with_it_passes(pytester, plain_server):
    # A gateway refusing OpenAI's best_of, service_tier and store as OpenAI refuses what it does not take: naming
    # each, the caller knows what to drop (passed, where vLLM alone is its known departure); with a blanket "not
    # accepted" the caller cannot tell which field was refused (failed).
    for message, verdict in ((None, "passed"), ("this request is not accepted", "failed")):
        rules = [
            RefuseJsonFields(fields=("best_of",), message=message, path="/v1/completions"),
            RefuseJsonFields(fields=("service_tier", "store"), message=message, path="/v1/chat/completions"),
        ]
        with FaultProxy(plain_server.url, rules=rules) as proxy:
            run_suites(pytester, "-m", "sampling", "-k", "unsupported", url=proxy.url)
            struck = proxy.hits if verdict == "passed" else proxy.hits[:1]  # a failure stops at the first refusal
            assert all(struck), f"the fault was never injected: {proxy.hits}"
        assert_verdicts(pytester.path / "junit.xml", {UNSUPPORTED: verdict})


# tiny-llama-other-seed: the same architecture, other random weights (the padding server). Every sampling contract
# is judged by the server's own answers, so another model must leave each passed, or undecided with its reason.
OTHER_SEED = HEALTHY


@pytest.mark.servers("padding")
@pytest.mark.pins(healthy=set(OTHER_SEED))
def test_every_sampling_contract_holds_on_the_model_of_another_seed(pytester, served):
    run_suites(pytester, "-m", "sampling", url=served("padding").url)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, OTHER_SEED)
    for run in contract_runs(junit):
        assert run.verdict != "undecided" or run.message.startswith("undecided: "), (run.key, run.message)
