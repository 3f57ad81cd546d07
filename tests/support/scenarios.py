"""The healthy scenarios' expected verdicts by contract id: one table each, derived from the catalogue's claims.

A scenario is a server and what the run is given: the profile, the inputs beyond a URL (an API key, a fleet,
...), what the server serves, its release. Its table is each contract's claim for that scenario (``not claimed``
where a condition turns it off, as the plugin decides it, else ``passed``, or ``known departure`` where the
release's fact marks one on the contract's ``departs_on``), then what only a real run shows: how
many cases a claimed contract runs on our servers, and where a real server's verdict is another. A new contract
that passes wherever it is claimed needs no line here; a fault test pins only what it fails, on top of its
scenario's table (``fixtures.verdicts.assert_verdicts(..., failed=...)``).

The claims are the plugin's own logic (``catalogue.applicability``), so a table cannot catch a wrong claim on
its own: the fault proofs pin each contract *failed* where it is claimed, and the run's set of tests must equal
the table's (``assert_verdicts``), so a claim that silently turns a suite into "not claimed" still fails CI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml
from packaging.version import Version

from pytest_vllm_conformance.catalogue import applicability, contracts
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.catalogue.serving_profile import Profile, validate
from tests.support.profiles import (
    EMBEDDING_PROFILE,
    GATED_PROFILE,
    GENERATION_PROFILE,
    MATRYOSHKA_PROFILE,
    PLAIN_PROFILE,
    POOLING_PROFILE,
    REASONING_PROFILE,
)

Verdict = str | dict[str, int]
NOT_CLAIMED = "not claimed"

# What every run against a server of ours by URL has: the server itself (no ingress alone), a max_model_len on
# /v1/models, Anthropic's SDK (the test extra), prefix caching on (vLLM's default).
URL_RUN = ("server_behind_ingress", "reported_max_model_len", "anthropic_sdk", "prefix_caching")

# How many cases each parametrized contract runs on tiny-llama under vLLM 0.32 (where it is claimed).
TINY_LLAMA_CASES: dict[str, Verdict] = {
    "structured_outputs.constraint_enforced": {"passed": 8},
    "structured_outputs.invalid_constraint_refused": {"passed": 4},
    # The ten conversations of the rendering corpus; four generation routes, plain and streamed.
    "rendering.chat_renders_as_tokenize": {"passed": 10},
    "token_accounting.usage_adds_up": {"passed": 8},
    # The gated routes: render, derender, token generate, by each spelling vLLM registers.
    "scale_out.enabled_routes_served": {"passed": 8},
    "scale_out.disabled_routes_refused": {"passed": 8},
    # Seven spellings of GET /v1/models (no root path in the URL).
    "auth.path_variants_refused": {"passed": 7},
    "wire.completion_shape": {"passed": 2},
    "wire.completion_stream_shape": {"passed": 2},
    "wire.completion_stream_framing": {"passed": 2},
    "wire.chat_shape": {"passed": 2},
    "wire.chat_stream_shape": {"passed": 2},
    "wire.chat_stream_framing": {"passed": 2},
    "wire.stream_errors_before_streaming": {"passed": 4},
    "wire.error_status_map": {"passed": 6},
    "wire.stream_continuous_usage": {"passed": 2},
}


@dataclass(frozen=True)
class Scenario:
    name: str
    profile: str | None
    given: tuple[str, ...] = ()  # inputs beyond URL_RUN (applicability.INPUTS and NEEDS): "api_key", "fleet", ...
    serves: tuple[str, ...] = ("generation",)  # applicability.SERVES: what the server's route table shows
    version: str = "0.32.0"
    cases: Mapping[str, Verdict] = field(default_factory=dict)  # applied where the contract is claimed
    verdicts_seen: Mapping[str, Verdict] = field(default_factory=dict)  # applied always: a real run's own verdict

    def verdicts(
        self, *features: str, failed: tuple[str, ...] = (), undecided: tuple[str, ...] = ()
    ) -> dict[str, Verdict]:
        """The whole table, or the contracts of ``features`` (a run that selects them with ``-m``); a fault run
        names what it fails (or leaves undecided) on top."""
        table = _table(self) | dict.fromkeys(undecided, "undecided") | dict.fromkeys(failed, "failed")
        return {cid: v for cid, v in table.items() if not features or cid.split(".", 1)[0] in features}


def _table(scenario: Scenario) -> dict[str, Verdict]:
    catalogue = contracts.load()
    profile = None
    if scenario.profile is not None:
        data = yaml.safe_load(scenario.profile)
        validate(data, source=f"scenario {scenario.name}")
        profile = Profile(data["name"], None, data)
    expect = Expectations(catalogue, Version(scenario.version), profile)
    inputs = dict.fromkeys([*applicability.INPUTS, *applicability.NEEDS, *applicability.SERVES], False)
    inputs |= dict.fromkeys([*URL_RUN, *scenario.given, *scenario.serves], True)
    unknown = set(scenario.given) - set(inputs) | set(scenario.cases) - set(catalogue.contracts)
    unknown |= set(scenario.verdicts_seen) - set(catalogue.contracts)
    if unknown:
        raise KeyError(f"scenario {scenario.name} names what the catalogue does not: {sorted(unknown)}")
    table: dict[str, Verdict] = {}
    for contract_id, contract in catalogue.contracts.items():
        claimed = applicability.claim(contract, catalogue, expect, inputs).claimed
        departs = contract.departs_on is not None and expect.departure(contract.departs_on) is not None
        healthy = "known departure" if departs else "passed"
        table[contract_id] = scenario.cases.get(contract_id, healthy) if claimed else NOT_CLAIMED
    return table | dict(scenario.verdicts_seen)


# vLLM 0.32 defaults under the plain profile: scale-out off, no key, no prompt embeds.
PLAIN = Scenario("plain", PLAIN_PROFILE, cases=TINY_LLAMA_CASES)
# The hardened server (API key, no /openapi.json) under the gated profile: every check runs on probed routes.
HARDENED = Scenario(
    "hardened",
    GATED_PROFILE,
    given=("api_key",),
    cases=TINY_LLAMA_CASES | {"wire.error_status_map": {"passed": 7}},  # with a key, its absence is probed too
)
# tiny-bert served with --runner pooling: no generation route, so every generation contract is not claimed.
POOLING = Scenario("pooling", EMBEDDING_PROFILE, serves=("pooling", "embeddings", "scoring"))
# tiny-bert-matryoshka in bfloat16, served as tiny-bert: the same routes, dimensions honoured.
MATRYOSHKA = Scenario("matryoshka", MATRYOSHKA_PROFILE, serves=("pooling", "embeddings", "scoring"))
# The embedding server given a baseline server (--vllm-baseline-url, every input it makes): the drift gate claimed.
EMBEDDING_DRIFT = Scenario(
    "embedding drift",
    EMBEDDING_PROFILE,
    given=("live_baseline", "quality_baseline", "serving_baseline", "live_serving_baseline"),
    serves=POOLING.serves,
)
# A cross-encoder (a classifier of one label): /score, /rerank and /classify, no /v1/embeddings.
RERANKER = Scenario("reranker", POOLING_PROFILE, serves=("pooling", "scoring", "classification"))
# A classifier of three labels: /classify only.
CLASSIFIER = Scenario("classifier", POOLING_PROFILE, serves=("pooling", "classification"))
# tiny-llama serving a LoRA adapter (tests/integration/test_lora_on_real_vllm.py) under the plain profile: the lora
# suite claimed by the adapter on /v1/models, its runtime contracts by the load route.
LORA = Scenario("lora", PLAIN_PROFILE, given=("lora_adapters", "lora_runtime"), cases=TINY_LLAMA_CASES)
# The hardened server behind a gateway (tests/integration/test_litellm_gateway.py, make test-gateway).
GATEWAY = Scenario("gateway", GATED_PROFILE, given=("api_key", "ingress"))
# Two replicas of one server (tests/integration/test_fleet_on_real_vllm.py), no profile.
FLEET = Scenario("fleet", None, given=("fleet",))
# The context suite alone under a profile of the served length (tests/integration/test_context_and_profiles.py):
# each limit on both completion endpoints.
CONTEXT_LIMIT_CASES: dict[str, Verdict] = dict.fromkeys(
    [
        "context.request_at_limit_served",
        "context.request_over_limit_refused_or_clamped",
        "context.prompt_over_limit_refused",
    ],
    {"passed": 2},
)


def context_run(profile: str) -> dict[str, Verdict]:
    """The context suite's verdicts on a server whose length ``profile`` declares (a run of ``-m context``)."""
    return Scenario("context", profile, cases=CONTEXT_LIMIT_CASES).verdicts("context")


# The plain server judged against its own capture, as profile and as baseline
# (tests/integration/test_context_and_profiles.py): the context limits on both completion endpoints.
CAPTURED = Scenario(
    "captured",
    PLAIN_PROFILE,
    given=("baseline",),
    cases=TINY_LLAMA_CASES | CONTEXT_LIMIT_CASES | {"profile_diff.serving_unchanged": {"passed": 1}},
)
# tiny-llama on vLLM 0.29 (tests/integration/test_version_matrix.py), no profile: no scale-out gate yet, and
# /v1/responses/render (0.30) and /inference/v1/abort_requests (0.32) do not exist.
V0_29 = Scenario("0.29", None, version="0.29.0", cases={"scale_out.enabled_routes_served": {"passed": 6}})
# tiny-llama served with the hermes tool-call parser (the generation server).
GENERATION = Scenario("generation", GENERATION_PROFILE)
# The project's reasoning model served with the deepseek_r1 reasoning parser: four chat cases (a question and after
# a tool result, plain and streamed), the two history field names of 0.28-0.32, Responses and Anthropic messages
# plain and streamed.
REASONING = Scenario(
    "reasoning",
    REASONING_PROFILE,
    cases=TINY_LLAMA_CASES
    | {
        "reasoning.reasoning_in_its_field": {"passed": 4},
        "reasoning.history_rendered_as_documented": {"passed": 2},
        "reasoning.routes_return_reasoning_blocks": {"passed": 4},
    },
)
# The tool_calls contracts a declared tool-call parser claims.
TOOL_CALLS_WITH_PARSER = tuple(c for c, v in GENERATION.verdicts("tool_calls").items() if v != NOT_CLAIMED)
