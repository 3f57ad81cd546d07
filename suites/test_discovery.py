"""The server says what it is, and serves its core routes.

The run reads /health, /version, /v1/models and the route table once, at
its start; an unreachable or unhealthy server stops it there with one line.
These contracts hold what discovery tolerates but a gate should not.
"""

from pytest_vllm_conformance import contract
from pytest_vllm_conformance.connection.discovery import GATEWAY_TARGET, parse_version

CORE_ROUTES = ("/v1/completions", "/v1/chat/completions")


@contract("discovery.version_parses")
def test_version_parses(vllm_client):
    response = vllm_client.get("/version", auth=False)
    payload = response.json_or_none()
    version = payload.get("version") if isinstance(payload, dict) else None
    # vLLM serves /version to anyone: a 404 there is something else answering (a gateway, say).
    hint = f" ({GATEWAY_TARGET})" if response.status == 404 else ""
    assert parse_version(version) is not None, (
        f"expected a PEP 440 version: {response.describe()} {response.text[:200]!r}{hint}"
    )


@contract("discovery.max_model_len_published")
def test_max_model_len_published(vllm_facts, vllm_evidence):
    max_model_len = vllm_facts.max_model_len
    assert isinstance(max_model_len, int) and max_model_len > 0, (
        f"/v1/models gives {vllm_facts.model!r} max_model_len {max_model_len!r}, not a positive integer: "
        "context checks and captures cannot know the limit"
    )
    vllm_evidence.judged(1, "model cards")  # read at the run's start, so no answer arrives during the test


@contract("discovery.core_routes_served")
def test_core_routes_served(vllm_facts, vllm_evidence):
    missing = [path for path in CORE_ROUTES if not vllm_facts.serves("POST", path)]
    assert not missing, f"POST {missing} not served (route table: {vllm_facts.inventory.summary()})"
    vllm_evidence.judged(len(CORE_ROUTES), "routes")  # the route table read at the run's start
