"""Whether a contract is claimed is decided from declarations and inputs, before any test runs."""

from __future__ import annotations

import threading
import time

from packaging.version import Version

from pytest_vllm_conformance.catalogue import applicability, contracts, route_cases
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.catalogue.serving_profile import Profile
from pytest_vllm_conformance.connection.discovery import ModelCard, ServerFacts
from pytest_vllm_conformance.connection.run_lock import RunLock

CATALOGUE = contracts.load()
NO_INPUTS = dict.fromkeys([*applicability.INPUTS, *applicability.NEEDS], False)


def claim(contract_id, version="0.32.0", profile=None, **inputs):
    data = {"profile": 1, "name": "p", **(profile or {})}
    expect = Expectations(
        CATALOGUE, Version(version) if version else None, Profile("p", None, data) if profile else None
    )
    return applicability.claim(CATALOGUE.contract(contract_id), CATALOGUE, expect, {**NO_INPUTS, **inputs})


def test_a_declared_choice_turns_a_contract_off_and_says_which():
    assert claim(
        "scale_out.disabled_routes_refused", profile={"endpoint": {"scale_out": "enabled"}}
    ) == applicability.Claim("not claimed", "endpoint.scale_out is enabled (profile p)")
    assert claim("scale_out.disabled_routes_refused").claimed  # the 0.32 default: disabled
    assert claim("scale_out.enabled_routes_served", version="0.29.0").claimed  # no gate before 0.30


def test_plugin_policy_is_named_as_such():
    assert claim("watermark.opt_out_control").reason == "watermark.required is false (plugin policy)"
    assert claim("auth.guarded_route_accepts_key").reason == "endpoint.auth is required (plugin policy)"


def test_a_requirement_the_release_cannot_meet_is_unmeetable_not_unclaimed():
    required = {"watermark": {"required": True}}
    found = claim("watermark.opt_out_control", version="0.29.0", profile=required)
    assert found.status == "unmeetable"
    assert found.reason == (
        "the profile requires watermark (watermark.required is true (profile p)), but vLLM 0.29.0 "
        "has no watermark (--watermark-config came in vLLM 0.30)"
    )
    assert claim("watermark.opt_out_control", version="0.32.0", profile=required).claimed
    queue = {"admission": {"max_queued_requests": 2}}
    assert claim("admission.burst_bounded", version="0.28.0", profile=queue).status == "unmeetable"
    # A contract narrower than its feature: the release's documented behaviour, not a requirement.
    assert claim("admission.rejections_counted", version="0.29.0", profile=queue) == applicability.Claim(
        "not claimed", "admission.rejections_counted applies to vLLM >=0.32; the server is 0.29.0"
    )


def test_inputs_claim_what_needs_them():
    assert claim("profile_diff.baseline_compared").reason.startswith("not given: --vllm-baseline=PATH")
    assert claim("profile_diff.baseline_compared", baseline=True).claimed
    assert not claim("quality.greedy_tokens_match_baseline").claimed
    assert claim("quality.greedy_tokens_match_baseline", quality_baseline=True).claimed


def test_a_claimed_contract_missing_an_input_it_needs_stays_claimed_and_says_what_is_missing():
    profile = {"endpoint": {"auth": "required"}}
    unchecked = claim("auth.guarded_route_accepts_key", profile=profile)
    assert unchecked.claimed and unchecked.unchecked.startswith("no API key given (--vllm-api-key=KEY")
    assert claim("auth.guarded_route_accepts_key", profile=profile, api_key=True).unchecked == ""
    assert claim("auth.open_server_declared", profile=profile).unchecked == ""  # needs no key
    off = claim("auth.guarded_route_accepts_key", profile={"endpoint": {"auth": "none"}})
    assert (off.status, off.unchecked) == ("not claimed", "")  # a declared choice comes first


def test_every_need_is_a_known_input():
    for contract in CATALOGUE.contracts.values():
        assert set(CATALOGUE.needs(contract)) <= set(applicability.NEEDS), contract.id


def test_every_condition_names_a_known_profile_key_or_input():
    for contract in CATALOGUE.contracts.values():
        for condition in CATALOGUE.conditions(contract):
            if condition.kind == "given":
                assert condition.subject in applicability.INPUTS, contract.id
            elif condition.kind == "serves":
                assert condition.subject in applicability.SERVES, contract.id
            else:
                CATALOGUE.declaration(condition.subject)  # raises for an undeclared key


# ---- the run lock ---------------------------------------------------------------------


def test_an_exclusive_holder_keeps_shared_holders_out_and_waiting_writers_go_first(tmp_path):
    lock = RunLock(tmp_path)
    events = []

    def reader(name, hold=0.0):
        with lock.shared():
            events.append(f"{name} in")
            time.sleep(hold)
            events.append(f"{name} out")

    def writer():
        with lock.exclusive():
            events.append("writer in")
            time.sleep(0.2)
            events.append("writer out")

    first = threading.Thread(target=reader, args=("first", 0.3))
    first.start()
    time.sleep(0.05)
    burst = threading.Thread(target=writer)
    burst.start()
    time.sleep(0.05)
    late = threading.Thread(target=reader, args=("late",))
    late.start()
    for thread in (first, burst, late):
        thread.join(5)
    # The writer waits for the reader already in; the reader that came after the writer waits for it.
    assert events.index("first out") < events.index("writer in") < events.index("writer out") < events.index("late in")


def test_without_a_directory_the_lock_is_free():
    lock = RunLock(None)
    with lock.exclusive(), lock.shared():
        pass


def test_the_fleet_entry_is_claimed_only_behind_a_declared_replicated_ingress():
    fleet = {"fleet_entry": {"replicated": True, "responses_store": True, "prefix_aware_routing": True}}
    stored, prefix = "fleet_entry.stored_response_found", "fleet_entry.prefix_served_from_cache"
    assert claim(stored, profile=fleet, ingress=True).claimed
    assert claim(prefix, profile=fleet, ingress=True).claimed
    assert claim(stored, ingress=True).reason == "fleet_entry.replicated is false (plugin policy)"
    assert claim(stored, profile=fleet).reason.startswith("not given: --vllm-ingress-url")
    # vLLM stores Responses only with VLLM_ENABLE_RESPONSES_API_STORE=1: off unless the profile says so.
    replicated = {"fleet_entry": {"replicated": True}}
    assert claim(stored, profile=replicated, ingress=True).reason == (
        "fleet_entry.responses_store is false (vLLM 0.32.0 default)"
    )
    assert claim(prefix, profile=replicated, ingress=True).reason == (
        "fleet_entry.prefix_aware_routing is false (plugin policy)"
    )


# ---- what the server serves: generation, pooling --------------------------------------------------------------


def _facts(routes):
    return ServerFacts(url="http://vllm", version="0.32.0", models=(ModelCard("m", 512),), model="m", routes=routes)


# What /openapi.json lists on vLLM 0.32 with --runner pooling (tiny-bert), and with --runner generate, in part.
POOLING_TABLE = {
    "/health": ("GET",),
    "/v1/models": ("GET",),
    "/tokenize": ("POST",),
    "/pooling": ("POST",),
    "/v1/embeddings": ("POST",),
    "/score": ("POST",),
    "/v1/rerank": ("POST",),
}
GENERATION_TABLE = {
    "/health": ("GET",),
    "/v1/models": ("GET",),
    "/tokenize": ("POST",),
    "/v1/completions": ("POST",),
    "/v1/chat/completions": ("POST",),
    "/v1/responses": ("POST",),
}


def _served(*tasks):
    return {task: task in tasks for task in ("generation", "pooling", "embeddings", "scoring", "classification")}


EVERYTHING = _served("generation", "pooling", "embeddings", "scoring", "classification")


def test_the_route_table_says_what_the_server_serves():
    assert route_cases.served_tasks(CATALOGUE, _facts(POOLING_TABLE)) == _served("pooling", "embeddings", "scoring")
    assert route_cases.served_tasks(CATALOGUE, _facts(GENERATION_TABLE)) == _served("generation")
    both = {**POOLING_TABLE, **GENERATION_TABLE}
    assert route_cases.served_tasks(CATALOGUE, _facts(both)) == _served(
        "generation", "pooling", "embeddings", "scoring"
    )
    # A classifier with three labels: /classify and /pooling, neither embeddings nor scoring (vLLM's
    # enable_scoring_api wants one label); a reranker (a classifier with one label) scores too.
    classifier = {"/health": ("GET",), "/v1/models": ("GET",), "/pooling": ("POST",), "/classify": ("POST",)}
    assert route_cases.served_tasks(CATALOGUE, _facts(classifier)) == _served("pooling", "classification")
    reranker = {**classifier, "/score": ("POST",), "/rerank": ("POST",), "/v2/rerank": ("POST",)}
    assert route_cases.served_tasks(CATALOGUE, _facts(reranker)) == _served("pooling", "scoring", "classification")
    # A listed path under another method is not the route: GET /v1/completions generates nothing.
    other_method = _facts({**POOLING_TABLE, "/v1/completions": ("GET",)})
    assert not route_cases.served_tasks(CATALOGUE, other_method)["generation"]
    # No table (nothing known of the routes), or one that shows no task's route at all (a gateway that hides them):
    # every task counts as served, so nothing is turned off on a guess.
    no_model_route = {"/health": ("GET",), "/v1/models": ("GET",)}
    assert route_cases.served_tasks(CATALOGUE, _facts(no_model_route)) == EVERYTHING
    speech = {**no_model_route, "/v1/audio/transcriptions": ("POST",)}
    assert route_cases.served_tasks(CATALOGUE, _facts(speech)) == _served()
    assert route_cases.served_tasks(CATALOGUE, _facts(None)) == EVERYTHING
    assert route_cases.served_tasks(CATALOGUE, None) == EVERYTHING


def test_a_server_that_serves_no_generation_does_not_claim_the_generation_contracts():
    reason = applicability.SERVES["generation"]
    for contract_id in (
        "sampling.n_gives_n_choices",
        "structured_outputs.constraint_enforced",
        "discovery.ready_generates",
        "discovery.core_routes_served",
        "sdk.chat_parses",
        "wire.completion_shape",
        "wire.responses_stream_framing",
        "context.request_at_limit_served",
        "token_accounting.usage_adds_up",
        "rendering.chat_renders_as_tokenize",
        "embedding_limits.prompt_embeds_refused_when_disabled",
        "engine_invariants.batch_invariant_greedy",
        "tool_calls.forced_choice_refused_without_parser",
        "agent_loops.messages_answer_shape",
    ):
        assert claim(contract_id, generation=False) == applicability.Claim("not claimed", reason), contract_id
        assert claim(contract_id, generation=True).claimed, contract_id
    assert reason.startswith("the server serves no generation: ") and "--runner pooling" in reason
    # What a pooling server answers too stays claimed there.
    for contract_id in ("discovery.version_parses", "sdk.lists_model", "wire.models_shape", "wire.error_shape"):
        assert claim(contract_id, generation=False).claimed, contract_id
    # A pooling route's validation error is bounded by the same app-wide handler; a completion body's bound is not
    # a pooling server's, whatever the profile declares.
    for contract_id in ("validation_bounds.error_body_bounded", "validation_bounds.header_flood_refused"):
        assert claim(contract_id, generation=False).claimed, contract_id
    body_bound = {"endpoint": {"max_request_bytes": 1048576}}
    assert claim("validation_bounds.request_body_bounded", profile=body_bound).claimed
    assert claim("validation_bounds.request_body_bounded", profile=body_bound, generation=False).reason == reason
    # An opt-in generation feature says the server first: a declaration cannot make a pooling server generate.
    queue = {"admission": {"max_queued_requests": 2}}
    assert claim("admission.burst_bounded", profile=queue, generation=False).reason == reason


def test_a_server_that_serves_no_pooling_does_not_claim_the_embeddings_shape():
    declared = {"wire": {"embedding_model": "tiny-bert"}}
    off = claim("wire.embeddings_shape", profile=declared, pooling=False)
    assert off == applicability.Claim("not claimed", applicability.SERVES["pooling"])
    on = claim("wire.embeddings_shape", profile=declared, pooling=True)
    assert on.claimed and on.reason.startswith("the server serves pooling; wire.embedding_model is tiny-bert")
    # Unknown (the run's inputs do not say): served.
    assert claim("wire.embeddings_shape", profile=declared).claimed


def test_the_pooling_contracts_are_claimed_where_the_server_serves_their_routes():
    embeddings = (
        "pooling.base64_matches_float",
        "pooling.batch_matches_alone",
        "pooling.dimensions_as_declared",
        "pooling.truncate_prompt_tokens_honoured",
    )
    bi_encoder = {"pooling": True, "embeddings": True, "scoring": True}
    for contract_id in (*embeddings, "pooling.score_is_embedding_cosine", "pooling.rerank_ranked"):
        assert claim(contract_id, **bi_encoder).claimed, contract_id
        # A generation server: the feature's own condition says so first.
        off = claim(contract_id, generation=True, pooling=False, embeddings=False, scoring=False)
        assert off == applicability.Claim("not claimed", applicability.SERVES["pooling"]), contract_id
    # A reranker (a classifier with one label): no /v1/embeddings, so no vector contract and no cosine; /rerank holds.
    reranker = {"pooling": True, "embeddings": False, "scoring": True}
    for contract_id in (*embeddings, "pooling.score_is_embedding_cosine"):
        assert claim(contract_id, **reranker) == applicability.Claim(
            "not claimed", applicability.SERVES["embeddings"]
        ), contract_id
    assert claim("pooling.rerank_ranked", **reranker).claimed
    classifier = {"pooling": True, "embeddings": False, "scoring": False}
    assert claim("pooling.rerank_ranked", **classifier) == applicability.Claim(
        "not claimed", applicability.SERVES["scoring"]
    )


def test_a_serves_condition_reads_as_the_server_serving():
    assert applicability.describe_conditions(CATALOGUE.contract("wire.completion_shape"), CATALOGUE) == (
        "claimed when the server serves generation"
    )


# ---- LoRA: an adapter on /v1/models, or declared ------------------------------------------------------------


def test_an_adapter_is_a_card_whose_parent_is_the_served_model():
    cards = (ModelCard("m", 512, "/models/m"), ModelCard("sql", 512, "/adapters/sql", parent="m"))
    other = ModelCard("x", 512, "/adapters/x", parent="another")
    facts = ServerFacts(url="http://vllm", version="0.32.0", models=(*cards, other), model="m")
    assert [card.id for card in facts.lora_adapters] == ["sql"]
    assert ServerFacts.from_dict(facts.to_dict()).lora_adapters == facts.lora_adapters
    assert not _facts(None).lora_adapters


def test_the_lora_contracts_are_claimed_where_an_adapter_is_served_and_runtime_ones_where_loading_is_on():
    assert claim("lora.adapter_answer_differs", lora_adapters=True).claimed
    assert claim("lora.adapter_answer_differs") == applicability.Claim(
        "not claimed", f"not given: {applicability.INPUTS['lora_adapters']}"
    )
    assert not claim("lora.load_unload_round_trip", lora_adapters=True).claimed
    assert claim("lora.load_unload_round_trip", lora_adapters=True, lora_runtime=True).claimed
