"""The server is there, healthy, and says what it is."""

from pytest_vllm_conformance import contract
from pytest_vllm_conformance.discovery import parse_version


@contract("discovery.health_ok")
def test_health_is_ok(vllm_client):
    response = vllm_client.get("/health", auth=False)
    assert response.status == 200, f"expected 200 from /health: {response.describe()}"


@contract("discovery.version_parses")
def test_version_parses(vllm_client):
    response = vllm_client.get("/version", auth=False)
    version = (response.json_or_none() or {}).get("version")
    assert parse_version(version) is not None, f"expected a PEP 440 version: {response.describe()} {response.text[:200]!r}"


@contract("discovery.model_listed")
def test_model_is_listed_with_max_model_len(vllm_client, vllm_facts):
    cards = {card.get("id"): card for card in vllm_client.get("/v1/models").json().get("data", [])}
    assert vllm_facts.model in cards, f"/v1/models does not list {vllm_facts.model!r}; it lists {sorted(cards)}"
    max_model_len = cards[vllm_facts.model].get("max_model_len")
    assert isinstance(max_model_len, int) and max_model_len > 0, f"max_model_len of {vllm_facts.model!r} is {max_model_len!r}"


@contract("discovery.openapi_core_routes")
def test_openapi_lists_the_core_routes(vllm_facts):
    assert vllm_facts.routes is not None, "the server publishes no /openapi.json route table (--disable-fastapi-docs?)"
    missing = [path for path in ("/v1/completions", "/v1/chat/completions") if not vllm_facts.serves("POST", path)]
    assert not missing, f"/openapi.json does not list POST {missing}"

