"""The entry in front of several replicas keeps each replica's state reachable.

Claimed only with --vllm-ingress-url and a profile declaring
``fleet_entry.replicated: true``. A stored Responses object lives in the
memory of the replica that made it (vLLM stores only with
VLLM_ENABLE_RESPONSES_API_STORE=1: ``fleet_entry.responses_store``); a prefix
cache too (``fleet_entry.prefix_aware_routing``, with
--enable-prompt-tokens-details so that usage shows cached tokens). Whether
the entry reaches a replica at all is read on that replica's own /metrics,
with nothing else of this run talking to it meanwhile.
"""

from pytest_vllm_conformance import contract, undecided

from .entry_requests import (
    burst_reaches,
    cached_tokens_of,
    create_stored_response,
    prefix_prompt,
    read_stored_response,
    summary,
)


@contract("fleet_entry.reaches_every_replica")
def test_reaches_every_replica(
    vllm_ingress_client, vllm_client, vllm_facts, vllm_expect, vllm_exclusive, vllm_target, vllm_record
):
    requests = vllm_expect.declared("fleet_entry", "reach_requests").value
    counter = vllm_expect.release.finished_request_counter
    with vllm_exclusive():  # the counter must count only what comes through the entry
        reach = burst_reaches(
            vllm_ingress_client,
            vllm_client,
            vllm_facts.model,
            metrics_path=vllm_expect.release.metrics_path,
            counter=counter,
            requests=requests,
        )
    if reach.served is None:
        undecided(f"cannot count what the replica served: {reach.problem}")
    vllm_record("figures", f"{reach.answered} of {reach.sent} answered through the entry, {reach.served:g} served here")
    assert reach.answered, f"the entry answered none of {reach.sent} completions: nothing to judge by"
    assert reach.served > 0, (
        f"the entry never routed to replica {vllm_target.label}: {reach.sent} requests of distinct sessions through "
        f"it, {reach.answered} answered, and the replica's {counter} stayed at {reach.before:g}"
    )


@contract("fleet_entry.stored_response_found")
def test_stored_response_found(vllm_ingress_client, vllm_facts, vllm_expect, vllm_record):
    created, response_id = create_stored_response(vllm_ingress_client, vllm_facts.model)
    assert response_id, f"POST /v1/responses with store true through the entry failed: {created.detail}"
    reads = read_stored_response(vllm_ingress_client, response_id, vllm_expect.declared("fleet_entry", "reads").value)
    vllm_record("figures", f"reads found: {sum(bool(read.seen) for read in reads)} of {len(reads)}")
    lost = [read for read in reads if not read.seen]
    assert not lost, (
        f"stored response {response_id} was not found on {len(lost)} of {len(reads)} reads through the entry "
        f"(a read that reached another replica; the entry needs affinity): {summary(reads)}; first: {lost[0].detail}"
    )


@contract("fleet_entry.prefix_served_from_cache")
def test_prefix_served_from_cache(vllm_ingress_client, vllm_facts, vllm_expect, vllm_record):
    usage = vllm_expect.release.prompt_cache_usage
    prompt = prefix_prompt(vllm_expect.declared("fleet_entry", "prefix_tokens").value)
    first = cached_tokens_of(vllm_ingress_client, vllm_facts.model, prompt)
    assert first.status == 200, f"the prefix request failed through the entry: {first.detail}"
    assert first.seen is not None, f"no {usage['field']}: start the replicas with {usage['flag']}: {first.detail}"
    repeats = [cached_tokens_of(vllm_ingress_client, vllm_facts.model, prompt) for _ in range(3)]
    vllm_record("figures", f"cached tokens per repeat: {[repeat.seen for repeat in repeats]}")
    cold = [repeat for repeat in repeats if not repeat.seen]
    assert not cold, (
        f"a {len(prompt)}-token prefix sent again through the entry was not served from cache on {len(cold)} of "
        f"{len(repeats)} repeats ({usage['field']}): {summary(repeats)}; first: {cold[0].detail}"
    )
