"""Whether a contract is claimed for this run, decided before its test runs.

A contract's conditions (its feature's ``claimed_if`` and its own, in
``suites/<feature>/contracts.yaml``) are declared choices: a profile value (or the default
its declaration names: the release's documented behaviour, or the plugin's
policy) or an input the run was given. A condition that does not hold makes
the contract "not claimed", with the condition as the reason. Nothing a test
observes can make it so: a claimed contract that cannot be checked is a
skip or a failure, never "not claimed".

A profile that explicitly requires a feature the server's release does not
have (watermarking on 0.29, admission control on 0.28) gets one failure per
contract saying so, instead of a quiet "not claimed".

What the server serves (``serves``: generation, pooling, embeddings, scoring, classification) is read from its
route table, the one observation that may turn a contract off: a pooling
server registers no generation route, so the generation features are not
its to be judged by, and a generation server's pooling ones are not either.

A claimed contract may need an input to be checked at all (``needs`` in
``suites/<feature>/contracts.yaml``: an API key, the watermark key). Without it the contract
stays claimed and is skipped by the harness, saying what is missing, so its
feature is ``partial``: the run did not check what the profile promises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pytest_vllm_conformance import NOT_CLAIMED
from pytest_vllm_conformance.catalogue.contracts import Catalogue, Condition, Contract
from pytest_vllm_conformance.catalogue.expectations import Expectations

CLAIMED = "claimed"
UNMEETABLE = "unmeetable"

# The most requests the engine_invariants preemption check sends at once: a KV cache holding this many whole
# requests cannot be made to preempt by it, so the check is claimed only below that (``preemptible_kv_cache``).
MOST_PREEMPTION_REQUESTS = 8

# What each `given` input is, and how a user gives it.
INPUTS: dict[str, str] = {
    "baseline": "--vllm-baseline=PATH (a profile captured with --vllm-capture-profile)",
    "quality_baseline": "--vllm-baseline-url=URL, --vllm-eval-baseline-file=PATH or --vllm-eval-save=PATH",
    "manifests": "--vllm-manifests=DIR (with --vllm-target-version=X when no server is given)",
    "server_log": "--vllm-log=FILE, or a server the plugin starts (--vllm-serve=MODEL_DIR)",
    "eval_task": "--vllm-eval-task=NAME",
    "checkpoint": (
        "--vllm-checkpoint=DIR (with --vllm-target-version=X when no server is given), or a quantized model "
        "directory the plugin serves (--vllm-serve=MODEL_DIR)"
    ),
    "startup_baseline_log": "--vllm-baseline-log=FILE (the log of a start to compare with)",
    "serving_baseline": "--vllm-baseline-url=URL (the old release or flags) or --vllm-perf-baseline-file=PATH",
    "live_serving_baseline": "--vllm-baseline-url=URL (a saved run holds closed-loop rounds, not capacity)",
    "live_baseline": "--vllm-baseline-url=URL (a second server asked the same requests)",
    "ingress": "--vllm-ingress-url=URL (the entry callers use, in front of the replicas)",
    "root_path": (
        "a URL whose path is the server's root path (--vllm-url=http://host:port/PREFIX, vLLM's --root-path; "
        "or --vllm-ingress-url with the path callers use)"
    ),
    "fleet": "more than one replica (--vllm-url given more than once, or --vllm-fleet=FILE)",
    "managed_server": (
        "a server the plugin starts and owns (--vllm-serve=MODEL_DIR): a server given by URL is not the run's to "
        "stop, so its SIGTERM drain is the deployment's to test (run the lifecycle suite with --vllm-serve and the "
        "deployment's flags)"
    ),
    # Read from the server, not an option: vLLM's own config says the feature is off, so nothing can be judged.
    "prefix_caching": (
        "a server that caches prefixes: its /metrics vllm:cache_config_info says enable_prefix_caching False "
        "(--no-enable-prefix-caching)"
    ),
    "lora_adapters": (
        "a LoRA adapter on the served model: /v1/models lists a model whose parent is its id (vLLM's --enable-lora "
        "with --lora-modules NAME=PATH), or the profile declares lora.adapters"
    ),
    "lora_runtime": (
        "runtime LoRA loading: the route table holds POST /v1/load_lora_adapter, which vLLM registers only with "
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1"
    ),
    "preemptible_kv_cache": (
        f"a KV cache small enough to preempt: its /metrics vllm:cache_config_info holds {MOST_PREEMPTION_REQUESTS} "
        "whole requests of the model's max_model_len at once (num_gpu_blocks x block_size), so no load of the suite "
        "could cause a preemption (on CPU, --num-gpu-blocks-override makes it small)"
    ),
}

# What a server may serve (``serves``), read from its route table (route_cases.served_tasks): the routes its release
# registers for that task (route_tables.yaml, by `when`), listed by /openapi.json or found by probe. A table that is
# unknown, or shows no task's route at all, counts as serving both. The text is the reason a contract is not claimed
# on a server without it.
SERVES: dict[str, str] = {
    "generation": (
        "the server serves no generation: its route table holds none of the release's generation routes "
        "(POST /v1/completions, POST /v1/chat/completions, ...), as a pooling runner's (--runner pooling) does"
    ),
    "pooling": (
        "the server serves no pooling: its route table holds none of the release's pooling routes "
        "(POST /v1/embeddings, /pooling, /classify, /score, ...), as a generation runner's does"
    ),
    "embeddings": (
        "the server serves no embeddings: its route table holds no POST /v1/embeddings of an embedding model, "
        "as a generation runner's, a classifier's or a reranker's does"
    ),
    "scoring": (
        "the server serves no scoring: its route table holds none of POST /score, /rerank, /v1/rerank, /v2/rerank, "
        "which vLLM registers for an embedding model or a classifier with one label"
    ),
    "classification": (
        "the server serves no classification: its route table holds no POST /classify, which vLLM registers for a "
        "classifier (a sequence classification model, one label or more), not for an embedding model"
    ),
}

# What a claimed contract may need to be checked at all (``needs``), and what its skip says is missing.
NEEDS: dict[str, str] = {
    "api_key": "no API key given (--vllm-api-key=KEY or VLLM_API_KEY; a gateway's own: --vllm-ingress-api-key)",
    "watermark_key": (
        "no watermark key given (--vllm-watermark-key=KEY or VLLM_CONFORMANCE_WATERMARK_KEY, "
        "or the variable the profile's watermark.key_env names)"
    ),
    "server_behind_ingress": "only --vllm-ingress-url was given: give --vllm-url, the server behind it",
    "reported_max_model_len": "/v1/models gives no max_model_len for the model, and the boundaries are placed there",
    "anthropic_sdk": "Anthropic's Python SDK is not installed (pip install 'pytest-vllm-conformance[anthropic]')",
}


@dataclass(frozen=True)
class Claim:
    status: str  # CLAIMED, NOT_CLAIMED or UNMEETABLE
    reason: str
    # Claimed, but an input it needs is missing: what (NEEDS); the harness skips it saying so.
    unchecked: str = ""

    @property
    def claimed(self) -> bool:
        return self.status == CLAIMED


@dataclass(frozen=True)
class _Evaluation:
    holds: bool
    reason: str
    declared_by_profile: bool = False


def _evaluate(condition: Condition, expect: Expectations, inputs: Mapping[str, bool]) -> _Evaluation:
    if condition.kind == "given":
        if condition.subject not in INPUTS:
            raise KeyError(f"claimed_if names an unknown input {condition.subject!r}; known: {sorted(INPUTS)}")
        if inputs.get(condition.subject):
            return _Evaluation(True, f"given {condition.subject}")
        return _Evaluation(False, f"not given: {INPUTS[condition.subject]}")
    if condition.kind == "serves":
        if condition.subject not in SERVES:
            raise KeyError(f"claimed_if names an unknown task {condition.subject!r}; known: {sorted(SERVES)}")
        if inputs.get(condition.subject, True):
            return _Evaluation(True, f"the server serves {condition.subject}")
        return _Evaluation(False, SERVES[condition.subject])
    section, key = condition.subject.split(".", 1)
    expectation = expect.declared(section, key)
    value = expectation.value
    if condition.comparison == "is_set":
        holds = value is not None and value != [] and value != ()
        shown = (
            f"{condition.subject} is {value} ({expectation.basis})" if holds else f"{condition.subject} is not declared"
        )
    else:
        holds = (value == condition.value) == (condition.comparison == "is")
        shown = f"{condition.subject} is {_show(value)} ({expectation.basis})"
    return _Evaluation(holds, shown, declared_by_profile=holds and expectation.from_profile)


def _show(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def claim(contract: Contract, catalogue: Catalogue, expect: Expectations, inputs: Mapping[str, bool]) -> Claim:
    """Claimed, not claimed (and which condition turned it off), or a requirement the release cannot meet."""
    reasons, required_by = [], []
    for condition in catalogue.conditions(contract):
        evaluation = _evaluate(condition, expect, inputs)
        if not evaluation.holds:
            return Claim(NOT_CLAIMED, evaluation.reason)
        reasons.append(evaluation.reason)
        if evaluation.declared_by_profile:
            required_by.append(evaluation.reason)
    feature = catalogue.features[contract.feature]
    version = expect.version
    if version is not None and not feature.has(version):
        missing = feature.missing_in(version)
        if required_by:
            return Claim(UNMEETABLE, f"the profile requires {feature.name} ({'; '.join(required_by)}), but {missing}")
        return Claim(NOT_CLAIMED, missing)
    if not contract.applies_to(version):
        return Claim(NOT_CLAIMED, f"{contract.id} applies to vLLM {contract.versions}; the server is {version}")
    lacking = [NEEDS[need] for need in catalogue.needs(contract) if not inputs.get(need)]
    return Claim(CLAIMED, "; ".join(reasons) or "claimed on every server", "; ".join(lacking))


def describe_conditions(contract: Contract, catalogue: Catalogue) -> str:
    """``claimed when endpoint.scale_out is disabled`` (or ``always claimed``), for listings and reports."""
    conditions = catalogue.conditions(contract)
    return f"claimed when {' and '.join(map(str, conditions))}" if conditions else "always claimed"
