"""The sampling suite's helpers and its by-release fact, without a server."""

import pytest
from packaging.version import Version

from atlas.plan import RELEASES
from atlas.render import sampling_parameters_table
from pytest_vllm_conformance.catalogue import contracts
from suites.sampling.effects import (
    input_tokens,
    token_id_named,
)
from suites.sampling.token_answers import (
    ANSWER_TOKENS,
    PROMPT,
    ROUTES,
    UNSUPPORTED_PROBES,
    request_body,
    top_logprobs,
)


@pytest.mark.parametrize("release", list(RELEASES))
def test_every_probe_is_taken_or_declared_ignored_by_every_release(release):
    # A probe neither taken nor ignored would fail the unsupported-parameter contract on a healthy server.
    fact = contracts.load().fact("sampling_parameters", Version(release))
    for route in ROUTES:
        assert not set(fact["accepted"][route]) & set(fact["ignored"][route]), (release, route)
        for field in UNSUPPORTED_PROBES[route]:
            assert field in fact["accepted"][route] or field in fact["ignored"][route], (release, route, field)


def test_watermarking_is_a_request_field_from_0_30():
    load = contracts.load()
    for release, taken in (("0.29", False), ("0.30", True), ("0.32", True)):
        fact = load.fact("sampling_parameters", Version(release))
        assert ("watermarking" in fact["accepted"]["completions"]) is taken, release


def test_the_atlas_table_has_a_column_per_release():
    table = sampling_parameters_table()
    header = next(line for line in table if line.startswith("| parameter |"))
    assert header == "| parameter | " + " | ".join(RELEASES) + " |"
    watermarking = next(line for line in table if line.startswith("| `watermarking` |"))
    assert watermarking.count("ignored") == 4 and watermarking.endswith("| taken | taken | taken | taken |")


def test_completions_alternatives_are_sorted_and_chat_ones_kept_as_sent():
    completions = {"logprobs": {"tokens": ["a"], "top_logprobs": [{"b": -2.0, "a": -0.5}]}}
    assert top_logprobs("completions", completions) == [("a", [("a", -0.5), ("b", -2.0)])]
    chat = {"logprobs": {"content": [{"token": "a", "top_logprobs": [{"token": "b", "logprob": -2.0}]}]}}
    assert top_logprobs("chat", chat) == [("a", [("b", -2.0)])]
    assert top_logprobs("chat", {"logprobs": None}) == []


def test_a_token_id_name_is_read_only_from_its_own_spelling():
    assert token_id_named("token_id:12") == 12 and token_id_named("hello") is None


def test_anthropic_input_tokens_add_the_cached_ones_back():
    usage = {"input_tokens": 3, "cache_read_input_tokens": 16, "output_tokens": 1}
    assert input_tokens("messages", {"usage": usage}) == 19
    assert input_tokens("responses", {"usage": {"input_tokens": 19}}) == 19
    assert input_tokens("responses", {}) is None


def test_each_route_gets_its_own_request_shape():
    assert request_body("chat", "m", omit=("max_tokens",), max_completion_tokens=3) == {
        "model": "m",
        "temperature": 0,
        "messages": [{"role": "user", "content": PROMPT}],
        "return_token_ids": True,
        "max_completion_tokens": 3,
    }
    responses = request_body("responses", "m", instructions="i")
    assert responses["input"] == PROMPT and "max_tokens" not in responses and responses["instructions"] == "i"
    messages = request_body("messages", "m", system="s")
    assert messages["max_tokens"] == ANSWER_TOKENS and "return_token_ids" not in messages
