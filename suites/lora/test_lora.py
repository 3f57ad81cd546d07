"""LoRA adapters: listed on their base, applied, kept apart from the base's answers, loaded and unloaded at run time.

The adapters judged are those the profile declares (``lora.adapters``) and every card of /v1/models whose parent
is the served model. Each answer check compares the server's greedy answers with each other (adapters.py), so it
holds for any model and adapter; statuses and the metric's shape are the release's facts (facts/lora.yaml).
"""

import pytest

from pytest_vllm_conformance import contract, fact_fixture, known_departure, undecided
from pytest_vllm_conformance.protocol import prometheus
from pytest_vllm_conformance.protocol.greedy_answers import divergence

from .adapters import (
    adapters_served,
    card_problems,
    compare_with_base,
    completion_status,
    fresh_name,
    gauge_while_streaming,
    greedy,
    interleaved,
    listed,
    load,
    lora_gauge,
    missing_path,
    names_in,
    parted,
    unload,
)

model_card = fact_fixture("lora_model_card")
unknown_model = fact_fixture("lora_unknown_model")
missing_path_refusal = fact_fixture("lora_load_missing_path")
requests_info = fact_fixture("lora_requests_info")

# How long the gauge is read while an adapter's stream is open.
IN_FLIGHT_SECONDS = 20.0


@pytest.fixture
def adapters(vllm_client, vllm_facts, vllm_expect):
    declared = vllm_expect.declared("lora", "adapters").value
    served = adapters_served(vllm_client, vllm_facts.model, declared)
    if not served:
        undecided(f"no adapter to judge: /v1/models lists none on {vllm_facts.model!r} and the profile declares none")
    return served


@pytest.fixture
def alone(vllm_exclusive):
    """No other test's requests meanwhile: the gauge's samples and the batch are this test's own."""
    with vllm_exclusive():
        yield


@contract("lora.adapter_listed_on_base")
def test_adapter_listed_on_base(vllm_client, vllm_facts, adapters, model_card, vllm_evidence):
    assert model_card["parent"] == "served_model", f"the release's card names another parent: {model_card}"
    cards = listed(vllm_client)
    problems = [problem for name in adapters for problem in card_problems(cards, name, vllm_facts.model)]
    assert not problems, "; ".join(problems)
    vllm_evidence.judged(len(adapters), "adapters listed")


@contract("lora.adapter_answer_differs")
def test_adapter_answer_differs(vllm_client, vllm_facts, vllm_expect, adapters, vllm_evidence):
    min_shift = vllm_expect.declared("lora", "min_logprob_shift").value
    same = {}
    for adapter in adapters:
        applied = compare_with_base(vllm_client, vllm_facts.model, adapter)
        if not applied.applies(min_shift):
            same[adapter] = applied
    assert not same, "; ".join(
        f"{name!r} answers as the base model {vllm_facts.model!r} does ({applied}, floor {min_shift}): "
        "the adapter is not applied"
        for name, applied in same.items()
    )
    vllm_evidence.judged(len(adapters), "adapters against the base")


@contract("lora.answers_kept_beside_each_other")
def test_answers_kept_beside_each_other(alone, vllm_client, vllm_facts, vllm_expect, adapters, vllm_evidence):
    gap = vllm_expect.declared("lora", "near_tie_gap").value
    adapter = adapters[0]
    pairs = interleaved(vllm_client, vllm_facts.model, adapter)
    split = [(first, d) for first, together in pairs if (d := divergence(first, together, gap)) is not None]
    hard = [(first, d) for first, d in split if not d.near_tie]
    departure = vllm_expect.departure("lora_cpu_no_adapter_tokens")
    if hard and departure is not None and all(first.model == vllm_facts.model for first, _ in hard):
        leaked = "; ".join(f"the base on {first.prompt!r}, alone against at once: {parted(d)}" for first, d in hard)
        known_departure(departure, leaked)
    assert not hard, "; ".join(
        f"{first.model!r} on {first.prompt!r}, alone against at once: {parted(d)}" for first, d in hard
    )
    if split:
        undecided("; ".join(f"{first.model!r} on {first.prompt!r}: {parted(d)}" for first, d in split))
    vllm_evidence.judged(len(pairs), "answers sent at once")


@contract("lora.unknown_adapter_not_found")
def test_unknown_adapter_not_found(vllm_client, unknown_model):
    name = fresh_name("no-such-adapter")
    response = completion_status(vllm_client, name)
    assert response.status == unknown_model["status"], (
        f"a completion naming {name!r}, which the server does not serve, answered {response.status}, "
        f"not {unknown_model['status']}: {response.text[:300]!r}"
    )


@contract("lora.load_missing_path_refused")
def test_load_missing_path_refused(vllm_client, vllm_facts, missing_path_refusal, unknown_model):
    name, path = fresh_name(), missing_path()
    response = load(vllm_client, name, path)
    try:
        assert 400 <= response.status < 500, (
            f"loading {path!r}, where no adapter is, answered {response.status} (the release answers "
            f"{missing_path_refusal['status']}), not a client error: {response.text[:300]!r}"
        )
        assert name not in listed(vllm_client), f"{name!r} is listed though its load was refused"
        served = completion_status(vllm_client, name)
        assert served.status == unknown_model["status"], f"{name!r} answers {served.status} though its load was refused"
    finally:
        if response.status == 200:
            unload(vllm_client, name)


@contract("lora.load_unload_round_trip")
def test_load_unload_round_trip(vllm_client, vllm_facts, adapters, unknown_model, vllm_evidence):
    cards = listed(vllm_client)
    source = next((cards[name] for name in adapters if name in cards and cards[name].root), None)
    if source is None or source.root is None:
        undecided(f"no served adapter lists the path it was loaded from (root) to load again: {adapters}")
    name, path = fresh_name(), source.root
    loaded = load(vllm_client, name, path)
    assert loaded.status == 200, f"loading {source.id!r}'s path {path!r} as {name!r}: {loaded.text[:300]!r}"
    try:
        problems = card_problems(listed(vllm_client), name, vllm_facts.model, expected_root=path)
        assert not problems, "after the load: " + "; ".join(problems)
        for prompt in ("The quick brown fox", "def fibonacci(n):"):
            original, again = greedy(vllm_client, source.id, prompt), greedy(vllm_client, name, prompt)
            assert original.token_ids == again.token_ids, (
                f"{name!r}, loaded from {source.id!r}'s path, answers {prompt!r} with {again.token_ids}, "
                f"not {source.id!r}'s {original.token_ids}"
            )
    finally:
        unloaded = unload(vllm_client, name)
    assert unloaded.status == 200, f"unloading {name!r}: {unloaded.describe()} {unloaded.text[:300]!r}"
    assert name not in listed(vllm_client), f"{name!r} is still listed after its unload"
    served = completion_status(vllm_client, name)
    assert served.status == unknown_model["status"], (
        f"a completion naming {name!r} after its unload answered {served.status}, not {unknown_model['status']}"
    )
    vllm_evidence.judged(1, "adapter loaded and unloaded")


@contract("lora.requests_info_metric")
def test_requests_info_metric(alone, vllm_client, adapters, requests_info, vllm_evidence):
    gauge = lora_gauge(prometheus.read(vllm_client, "/metrics"), requests_info)
    assert gauge is not None, f"/metrics exports no {requests_info['name']} on a server that serves LoRA adapters"
    assert gauge.type == requests_info["type"], f"{requests_info['name']} is a {gauge.type}, not a gauge"
    labels = (requests_info["max_loras_label"], requests_info["running_label"], requests_info["waiting_label"])
    for sample, _ in gauge.samples:
        missing = [label for label in labels if label not in sample]
        assert not missing, f"a {requests_info['name']} sample lacks {missing}: {sample}"
        max_lora = sample[requests_info["max_loras_label"]]
        assert max_lora.isdigit() and int(max_lora) > 0, f"max_lora is {max_lora!r}, not a positive integer"
    adapter = adapters[0]
    seen = gauge_while_streaming(vllm_client, adapter, requests_info, IN_FLIGHT_SECONDS)
    if seen.seen is None and seen.problem == "the stream ended first":
        undecided(f"{adapter!r}'s stream ended before /metrics named it ({seen.readings} readings)")
    assert seen.seen is not None, (
        f"while {adapter!r}'s stream was in flight, {requests_info['name']}'s latest sample never named it among "
        f"the running or waiting adapters ({seen.readings} readings; the last: {seen.last}) {seen.problem}"
    )
    running = names_in(seen.seen, requests_info["running_label"], requests_info["separator"])
    vllm_evidence.judged(seen.readings, f"readings ({adapter!r} {'running' if adapter in running else 'waiting'})")
