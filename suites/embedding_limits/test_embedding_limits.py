"""Client-supplied embedding payloads are refused or bounded as declared.

``prompt_embeds`` on /v1/completions is base64 of ``torch.save`` bytes, and
vLLM decodes it inside the API server. Before 0.30 a few-KB sparse payload
declaring a huge shape was densified whatever it declared; from 0.30 the
declared size is checked first (``VLLM_MAX_EMBED_DECODE_BYTES``). The
payloads are written without torch (``tensor_payload``).
"""

import re

import pytest

from pytest_vllm_conformance import contract, each, undecided
from pytest_vllm_conformance.protocol import prometheus
from pytest_vllm_conformance.protocol.error_envelope import error, error_message

from . import tensor_payload
from .payloads import oversized_prompt_embeds


@pytest.fixture(scope="module")
def prompt_embeds(vllm_expect):
    return vllm_expect.declared("endpoint", "prompt_embeds")


@pytest.fixture(scope="module")
def send(vllm_client, vllm_facts):
    def send(payload: bytes):
        body = {"model": vllm_facts.model, "prompt_embeds": tensor_payload.to_base64(payload), "max_tokens": 1}
        return vllm_client.post("/v1/completions", body)

    return send


@pytest.fixture(scope="module")
def parameter(vllm_expect):
    return vllm_expect.release.prompt_embeds_parameter


def refused_parameter(response):
    return error(response).get("param")


def resident_memory(client):
    """The API server's RSS from /metrics, or None when it does not export it."""
    return prometheus.read(client, "/metrics").total("process_resident_memory_bytes")


@pytest.fixture(scope="module")
def hidden_size(send, vllm_expect):
    declared = vllm_expect.declared("endpoint", "prompt_embeds_hidden_size")
    if declared.value:
        return declared.value
    hint = re.search(vllm_expect.release.prompt_embeds_hidden_size_hint, send(tensor_payload.dense_float32(1, 1)).text)
    if hint is None:
        pytest.skip("could not run: the model's hidden size is unknown; declare endpoint.prompt_embeds_hidden_size")
    return int(hint.group(1))


@contract("embedding_limits.prompt_embeds_refused_when_disabled")
def test_prompt_embeds_refused_when_disabled(prompt_embeds, send, parameter, vllm_expect):
    # A well-formed payload, so that a refusal can only be for the feature being off: a server that refuses
    # it as malformed would refuse it with the feature on too. The disabled refusal is told by its message,
    # as a malformed payload's refusal names the same parameter.
    hidden_size = vllm_expect.declared("endpoint", "prompt_embeds_hidden_size").value
    if not hidden_size:
        undecided(
            "cannot send a well-formed payload while prompt embeds are disabled: the model's hidden size is "
            "unknown; declare endpoint.prompt_embeds_hidden_size"
        )
    refusal = vllm_expect.release.prompt_embeds_disabled_refusal
    response = send(tensor_payload.dense_float32(4, hidden_size))
    seen = f"{response.describe()} {response.text[:200]!r}"
    assert response.status == refusal["status"] and refused_parameter(response) == parameter, (
        f"prompt embeds are {prompt_embeds}, but a well-formed 4x{hidden_size} prompt_embeds payload was not "
        f"refused with {refusal['status']} naming {parameter!r}: {seen}"
    )
    assert refusal["message"] in (error_message(response) or ""), (
        f"prompt embeds are {prompt_embeds}, but a well-formed 4x{hidden_size} prompt_embeds payload was refused "
        f"for another reason than prompt embeds being disabled (the message does not name "
        f"{refusal['message']!r}): {seen}"
    )


@contract("embedding_limits.small_prompt_embeds_accepted")
def test_small_prompt_embeds_accepted(hidden_size, send):
    response = send(tensor_payload.dense_float32(4, hidden_size))
    usage = (response.json_or_none() or {}).get("usage") or {}
    assert response.status == 200, (
        f"a 4x{hidden_size} prompt_embeds payload was not served: {response.describe()} {response.text[:200]!r}"
    )
    assert usage.get("prompt_tokens") == 4, f"4 embedded tokens were counted as {usage.get('prompt_tokens')}"


@contract("embedding_limits.oversized_declaration_refused")
@each("declaration", oversized_prompt_embeds)
def test_oversized_declaration_refused(declaration, send, parameter, vllm_client, vllm_expect):
    bound = vllm_expect.release.prompt_embeds_decode_bound
    note = "" if bound["bounded"] else f" ({bound['note']})"
    max_seconds = vllm_expect.declared("endpoint", "prompt_embeds_max_seconds")
    max_growth = vllm_expect.declared("endpoint", "prompt_embeds_max_growth_bytes")
    before = resident_memory(vllm_client)
    response = send(tensor_payload.sparse_coo_declaring(declaration.shape))
    after = resident_memory(vllm_client)
    assert response.status == 400 and refused_parameter(response) == parameter, (
        f"a payload that {declaration} was not refused with 400 naming {parameter!r}: "
        f"{response.describe()} {response.text[:200]!r}{note}"
    )
    assert response.elapsed <= max_seconds.value, (
        f"a payload that {declaration} took {response.elapsed:.2f} s to refuse, over {max_seconds}: "
        f"it was decoded before it was refused{note}"
    )
    if before is None or after is None:
        undecided(
            "refused fast, but the memory growth could not be checked: /metrics exports no "
            "process_resident_memory_bytes for the API server"
        )
    assert after - before <= max_growth.value, (
        f"the server grew by {(after - before) / 2**20:.0f} MiB refusing a payload that {declaration}, "
        f"over {max_growth}"
    )
