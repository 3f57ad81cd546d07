"""The server says what it is, and serves its core routes.

The run reads /health, /version, /v1/models and the route table once, at
its start; an unreachable or unhealthy server stops it there with one line.
These contracts hold what discovery tolerates but a gate should not. Before
any suite judges the server, discovery asks for one token: a server whose
/health says 200 while its engine cannot generate (a kernel its CPU build
lacks, a hung or dead engine core) is one failure here, naming the engine's
error from the log, and every other check against it is "not checked".
"""

import pytest

from pytest_vllm_conformance import contract, undecided
from pytest_vllm_conformance.connection.discovery import GATEWAY_TARGET, parse_version
from pytest_vllm_conformance.protocol.engine_errors import last_errors

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
    vllm_evidence.judged(1, "/v1/models answers", missing="discovery read no /v1/models")
    max_model_len = vllm_facts.max_model_len
    assert isinstance(max_model_len, int) and max_model_len > 0, (
        f"/v1/models gives {vllm_facts.model!r} max_model_len {max_model_len!r}, not a positive integer: "
        "context checks and captures cannot know the limit"
    )


@contract("discovery.core_routes_served")
def test_core_routes_served(vllm_facts, vllm_evidence):
    vllm_evidence.judged(len(CORE_ROUTES), "looked-up routes")
    missing = [path for path in CORE_ROUTES if not vllm_facts.serves("POST", path)]
    assert not missing, f"POST {missing} not served (route table: {vllm_facts.inventory.summary()})"


@contract("discovery.ready_generates")
def test_ready_generates(vllm_facts, vllm_log_path, vllm_evidence):
    first = vllm_facts.first_generation
    assert first is not None, "discovery asked for no token"
    if first.problem is not None:
        errors = last_errors(vllm_log_path) if vllm_log_path else []
        said = (
            "; the log's last errors: " + " | ".join(errors) if errors else " (no log to read the engine's error from)"
        )
        pytest.fail(f"/health answered 200, but {first.problem}{said}", pytrace=False)
    if first.status != 200:
        undecided(f"one token was refused, not generated, so this server's engine is not shown to run: {first.answer}")
    vllm_evidence.judged(1, "generated tokens")
