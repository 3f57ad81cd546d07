"""The atlas checks the catalogue: what the facts predict for a release, against what it measured.

A prediction names a fact, the flag set it speaks of, the contract, and the outcome the fact's value
for that release implies. A measured outcome that differs fails the run, naming the fact: the facts
are only as good as their measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from pytest_vllm_conformance.catalogue import contracts


@dataclass(frozen=True)
class Prediction:
    fact: str
    flag_set: str
    contract: str
    outcome: Callable[[Any], str]  # the fact's value for the release -> the outcome it implies


# The statuses a caller retries elsewhere (the lifecycle suite's refusals).
RETRYABLE = (408, 429, 502, 503, 504)

PREDICTIONS = (
    # Before 0.32 a streamed Responses answer's final output is rebuilt with fresh ids (vllm issue 56285).
    *(
        Prediction("responses_stream_items_reused", flag_set, contract, lambda reused: "passed" if reused else "failed")
        for flag_set, contract in (
            ("plain", "agent_loops.responses_stream_is_the_answer"),
            ("generation", "agent_loops.responses_stream_is_the_answer"),
            ("generation", "agent_loops.responses_stream_call_is_the_answer"),
        )
    ),
    # Before 0.32 a forced tool's tool_use block ends with stop_reason end_turn: the client does not run it.
    Prediction(
        "messages_forced_tool_stop_reason",
        "generation",
        "agent_loops.messages_tool_use_round_trips",
        lambda stop_reason: "passed" if stop_reason == "tool_use" else "failed",
    ),
    # Before 0.32 custom tools are dropped without a word: no custom_tool_call, no refusal.
    *(
        Prediction(
            "responses_custom_tools",
            "generation",
            contract,
            lambda custom: "passed" if custom["free_form"] == "served" else "failed",
        )
        for contract in (
            "agent_loops.responses_custom_tool_round_trips",
            "agent_loops.responses_stream_custom_call_is_the_answer",
        )
    ),
    *(
        Prediction(
            "responses_custom_tools",
            flag_set,
            "agent_loops.responses_custom_tool_formats",
            lambda custom: "failed" if custom["grammar"]["handling"] == "dropped" else "passed",
        )
        for flag_set in ("plain", "generation")
    ),
    # The production profile declares the gate closed: a release that serves the routes without a flag fails.
    Prediction(
        "scale_out_default",
        "plain",
        "scale_out.disabled_routes_refused",
        lambda default: "passed" if default == "disabled" else "failed",
    ),
    Prediction(
        "scale_out_default",
        "plain",
        "scale_out.enabled_routes_served",
        lambda default: "not claimed",
    ),
    Prediction(
        "validation_error_bounds",
        "plain",
        "validation_bounds.error_body_bounded",
        lambda bounds: "passed" if bounds["bounded"] else "failed",
    ),
    Prediction(
        "validation_error_bounds",
        "plain",
        "validation_bounds.error_entries_bounded",
        lambda bounds: "passed" if bounds["bounded"] else "failed",
    ),
    # --root-path /v behind a key: a key check that strips the root path as a string opens the bare /v1 routes.
    Prediction(
        "auth_root_path_stripping",
        "root_path",
        "auth.root_path_prefix_required",
        lambda stripping: "passed" if stripping["segment_aware"] else "failed",
    ),
    # Six blocks of KV cache: the override is read (fact kv_cache_capacity), so three greedy answers at once preempt,
    # and vLLM's recompute gives each the tokens it gives alone.
    Prediction(
        "kv_cache_capacity",
        "small_kv_cache",
        "engine_invariants.preempted_answer_unchanged",
        lambda capacity: "passed",
    ),
    # --shutdown-timeout 10 against a declared drain of 10 s: the streams finish and the process goes in time, while
    # new requests and /health get what the release answers while it drains (a 500 is no refusal, a 200 no signal).
    *(
        Prediction("shutdown_modes", "shutdown_timeout", contract, lambda modes: "passed")
        for contract in ("lifecycle.in_flight_drained", "lifecycle.exits_within_drain")
    ),
    Prediction(
        "shutdown_modes",
        "shutdown_timeout",
        "lifecycle.new_requests_refused",
        lambda modes: "passed" if modes["drain_new_request_status"] in RETRYABLE else "failed",
    ),
    Prediction(
        "shutdown_modes",
        "shutdown_timeout",
        "lifecycle.health_not_ok_while_draining",
        lambda modes: "failed" if modes["drain_health_status"] == 200 else "passed",
    ),
)


# The pooling flag sets (atlas/plan.py): an embedding model, a cross-encoder (one label), a classifier (three).
POOLING_FLAG_SETS = ("embedding", "cross_encoder", "classifier")

POOLING_PREDICTIONS = (
    # Every pooling runner serves /pooling, and refuses the fields and tasks the release removed (normalize; the
    # tasks score and encode) with its status, naming them.
    *(
        Prediction(
            "removed_pooling_parameters",
            flag_set,
            "pooling.removed_fields_refused",
            lambda removed: "passed",
        )
        for flag_set in POOLING_FLAG_SETS
    ),
    # The scoring routes are registered for an embedding model (scored as the cosine of the two embeddings) and a
    # classifier of one label, never for one of three: there the scoring contracts are not claimed.
    Prediction(
        "scoring_routes",
        "embedding",
        "pooling.score_is_embedding_cosine",
        lambda routes: "passed" if routes["bi_encoder_score"] == "cosine" else "failed",
    ),
    *(
        Prediction("scoring_routes", flag_set, contract, lambda routes: "passed")
        for flag_set in ("embedding", "cross_encoder")
        for contract in ("pooling.rerank_ranked", "pooling.score_matches_pairs")
    ),
    *(
        Prediction("scoring_routes", "classifier", contract, lambda routes: "not claimed")
        for contract in ("pooling.rerank_ranked", "pooling.score_matches_pairs")
    ),
    # /classify: a sigmoid for one label, a softmax over three (fact classify_activation), each as the suite expects.
    *(
        Prediction("classify_activation", flag_set, "pooling.classify_probabilities", lambda activation: "passed")
        for flag_set in ("cross_encoder", "classifier")
    ),
    # dimensions on a model that declares no Matryoshka: refused with the release's 400 naming it.
    Prediction(
        "embedding_dimensions",
        "embedding",
        "pooling.dimensions_as_declared",
        lambda dimensions: "passed" if dimensions["refusal_names"] == "dimensions" else "failed",
    ),
)
PREDICTIONS += POOLING_PREDICTIONS

LORA_PREDICTIONS = (
    # The adapter's card on /v1/models names the served model as its parent and its load path as its root.
    Prediction("lora_model_card", "lora", "lora.adapter_listed_on_base", lambda card: "passed"),
    # An unknown adapter's name is answered as an unknown model: 404 where the fact says so.
    Prediction(
        "lora_unknown_model",
        "lora",
        "lora.unknown_adapter_not_found",
        lambda unknown: "passed" if unknown["status"] == 404 else "failed",
    ),
    # Loading a path that holds no adapter: a client error (never a 500) where the fact says so.
    Prediction(
        "lora_load_missing_path",
        "lora",
        "lora.load_missing_path_refused",
        lambda missing: "passed" if 400 <= missing["status"] < 500 else "failed",
    ),
    Prediction("lora_requests_info", "lora", "lora.requests_info_metric", lambda gauge: "passed"),
    # One slot (--max-loras 1): where the CPU kernels index the slots with -1, a base request batched with the
    # adapter's gets the adapter, the release's known departure; where they mask -1, the base keeps its answer.
    Prediction(
        "lora_cpu_no_adapter_tokens",
        "lora",
        "lora.answers_kept_beside_each_other",
        lambda kernels: "known departure" if kernels["selects"] == "last_slot" else "passed",
    ),
)
PREDICTIONS += LORA_PREDICTIONS


def derived_length(rule: dict, config: dict) -> int:
    """The max_model_len the fact ``yarn_max_model_len`` predicts for a checkpoint without --max-model-len."""
    scaling = config.get("rope_scaling") or {}
    if rule["rule"].startswith("original_max_position_embeddings"):
        return int(scaling["original_max_position_embeddings"] * scaling["factor"])
    return int(config["max_position_embeddings"])


def _server_contradictions(record: dict, catalogue: contracts.Catalogue, version: Version) -> list[str]:
    """What the facts predict of the server itself: whether it takes the flags, the length it derives."""
    where = f"{record['release']}/{record['flag_set']}"
    if record["flag_set"] == "scale_out":
        gate = catalogue.fact("scale_out_gate", version)["gate"]
        refused = record.get("status") == "server refused the flags"
        if refused != (gate == "none"):
            return [
                f"{where}: fact scale_out_gate ({gate}) predicts --enable-scale-out is "
                f"{'unknown' if gate == 'none' else 'taken'}, but the server {record.get('status')}"
            ]
    if record["flag_set"] == "gptq_group":
        behaviour = catalogue.fact("gptq_grouped_act_order", version)["behaviour"]
        refused = record.get("status") == "server refused the flags"
        if refused != (behaviour == "refused"):
            return [
                f"{where}: fact gptq_grouped_act_order ({behaviour}) predicts the grouped checkpoint "
                f"{'refused' if behaviour == 'refused' else 'served'}, but the server {record.get('status')}"
            ]
    if record["flag_set"] == "yarn" and record.get("status") == "measured" and record.get("model_config"):
        expected = derived_length(catalogue.fact("yarn_max_model_len", version), record["model_config"])
        got = record["capture"]["observed"].get("max_model_len")
        if got != expected:
            return [f"{where}: fact yarn_max_model_len predicts max_model_len {expected}, measured {got}"]
    return []


def contradictions(records: dict[str, dict]) -> list[str]:
    """Each measured outcome the catalogue's facts (or a contract's versions) predict otherwise, in one line."""
    catalogue = contracts.load()
    found = []
    for record in records.values():
        version = Version(record.get("vllm_version") or record["release"] + ".0")
        found += _server_contradictions(record, catalogue, version)
        if record.get("status") != "measured":
            continue
        measured = record["contracts"]
        for contract_id, outcome in measured.items():
            contract = catalogue.contracts.get(contract_id)
            if contract is None:
                continue
            # A contract off by the profile's declaration is "not claimed" on any release; one that ran, or
            # one called missing on a release its versions contain, contradicts them.
            ran = outcome["outcome"] in ("passed", "failed", "undecided", "known departure")
            missing = outcome["outcome"] == "not available"
            if (ran or missing) and contract.applies_to(version) == missing:
                found.append(
                    f"{record['release']}/{record['flag_set']}: {contract_id} applies to vLLM {contract.versions}, "
                    f"but measured {outcome['outcome']} on {version}"
                )
        for prediction in PREDICTIONS:
            if prediction.flag_set != record["flag_set"] or prediction.contract not in measured:
                continue
            expected = prediction.outcome(catalogue.fact(prediction.fact, version))
            got = measured[prediction.contract]
            if got["outcome"] != expected:
                found.append(
                    f"{record['release']}/{record['flag_set']}: fact {prediction.fact} predicts "
                    f"{prediction.contract} {expected} on vLLM {version}, measured {got['outcome']}: {got['reason']}"
                )
    return found
