"""Agent loops: what Codex, the Agents SDK and Claude Code rely on across a stream and across turns.

An agent builds its turn from the stream and echoes it back: the items of a
streamed Responses answer must be the final answer's (ids, call ids,
arguments, text), a call's arguments must be announced done, and a tool
loop's call ids must name one call each, on chat and on Responses (with
the call outputs fed back, or the turn named by previous_response_id where
the server stores responses). Claude Code speaks Anthropic's
Messages API to /v1/messages: its answer, its event sequence (which must add
up to the unstreamed answer) and its errors are judged as Anthropic's
protocol, not OpenAI's. The tool contracts need a tool-call parser; a model
that writes no whole call leaves them undecided, never failed, but a forced
choice answered with no call fails unless the answer was cut inside one.
"""

from functools import partial

import pytest

from pytest_vllm_conformance import contract, fact_fixture, known_departure, undecided
from pytest_vllm_conformance.catalogue.release_facts import padding_note
from pytest_vllm_conformance.protocol.cut_calls import judge_cut_call, skip_if_cut
from pytest_vllm_conformance.protocol.error_envelope import error_message

from . import messages, responses, turns
from . import responses_loop as loop
from . import responses_shapes as shapes
from .forced_calls import judge_uncalled
from .turns import TOOL_RESULT, fed_back


@pytest.fixture
def chat_turn(vllm_client, vllm_facts):
    """``chat_turn(function, history)``: a forced call of ``function`` after ``history``, asserted served."""
    return partial(turns.chat_turn, vllm_client, vllm_facts.model)


@pytest.fixture
def responses_stream(vllm_client):
    """``responses_stream(body)``: the parsed events of a streamed POST /v1/responses, asserted served."""
    return partial(turns.responses_stream, vllm_client)


@pytest.fixture
def messages_answer(vllm_client):
    """``messages_answer(body, stream=False)``: a /v1/messages answer, asserted served (a dict, or a stream)."""
    return partial(turns.messages_answer, vllm_client)


@pytest.fixture
def responses_turn(vllm_client):
    """``responses_turn(body, what)``: an unstreamed POST /v1/responses, asserted served (a responses_loop.Turn)."""
    return lambda body, what: loop.read_turn(vllm_client.post("/v1/responses", body), what)


item_prefixes = fact_fixture("responses_item_id_prefixes")
error_envelopes = fact_fixture("messages_error_envelopes")
unknown_call_output = fact_fixture("responses_unknown_call_output")
store_routes = fact_fixture("responses_store_routes")
custom_tools = fact_fixture("responses_custom_tools")


@pytest.fixture(scope="module")
def uncalled(vllm_expect):
    """``uncalled(text, cut, names, what, only, limit)``: why a forced choice's answer with no call is undecided (cut
    inside a call of ``names``, as its text shows), or AssertionError: a forced call that never came."""
    envelopes = vllm_expect.fact("tool_call_envelopes").get(
        vllm_expect.declared("generation", "tool_call_parser").value
    )
    return lambda text, cut, names, what, only, limit="max_output_tokens": judge_uncalled(
        text, cut, names, envelopes, what, only, limit
    )


@pytest.fixture(scope="module")
def cut_call(vllm_expect):
    """``cut_call(answer, names)``: the Judgement of a forced call's answer cut by max_tokens."""
    parser = vllm_expect.declared("generation", "tool_call_parser").value
    envelopes = vllm_expect.fact("tool_call_envelopes").get(parser)
    return lambda answer, names: judge_cut_call(answer, names, parser, envelopes)


@pytest.fixture(scope="module")
def padding(vllm_expect):
    return padding_note(vllm_expect.release.json_whitespace_control, vllm_expect.version_label, tool_calls=True)


@contract("agent_loops.responses_stream_is_the_answer")
def test_responses_stream_is_the_answer(responses_stream, item_prefixes, vllm_facts, vllm_evidence):
    stream = responses_stream(responses.text_request(vllm_facts.model))
    problems = responses.stream_problems(stream, item_prefixes)
    assert not problems, "the streamed items are not the final answer's:\n  " + "\n  ".join(problems)
    vllm_evidence.judged(len(responses.final_output(stream) or []), "streamed items", missing="no output item")


@contract("agent_loops.responses_stream_call_is_the_answer")
def test_responses_stream_call_is_the_answer(
    responses_stream, item_prefixes, uncalled, vllm_facts, vllm_evidence, vllm_record
):
    stream = responses_stream(responses.call_request(vllm_facts.model))
    problems = responses.stream_problems(stream, item_prefixes)
    assert not problems, "the streamed forced call is not the final answer's:\n  " + "\n  ".join(problems)
    calls = responses.items_of(stream, "function_call")
    if not calls:
        output = responses.final_output(stream) or []
        kinds = [item.get("type") for item in output if isinstance(item, dict)]
        text, cut = responses.message_text(output), responses.stream_cut(stream)
        undecided(uncalled(text, cut, ["get_weather"], "the streamed forced call", kinds))
    vllm_record("streamed_call_arguments", repr(calls[0].get("arguments"))[:200])
    vllm_evidence.judged(len(calls), "streamed function calls")


@contract("agent_loops.chat_tool_loop_round_trips")
def test_chat_tool_loop_round_trips(chat_turn, cut_call, padding, vllm_evidence):
    first = chat_turn("get_weather")
    skip_if_cut(first.answer, "the loop's first call", ["get_weather"], cut_call, padding)
    assert len(first.calls) == 1 and isinstance(first.call_ids[0], str) and first.call_ids[0], (
        f"the forced call did not come back as one call with an id: {first.calls}"
    )
    second = chat_turn("get_time", fed_back(first))
    skip_if_cut(second.answer, "the loop's second call", ["get_time"], cut_call, padding)
    assert len(second.calls) == 1 and isinstance(second.call_ids[0], str) and second.call_ids[0], (
        f"the turn after the tool result did not come back as one call with an id: {second.calls}"
    )
    assert second.call_ids[0] not in first.call_ids, (
        f"the second call's id {second.call_ids[0]!r} is one the loop already gave (and the client echoed as "
        f"tool_call_id): a client keying results by call id cannot tell the calls apart"
    )
    vllm_evidence.judged(1, "tool loops")


@contract("agent_loops.messages_answer_shape")
def test_messages_answer_shape(messages_answer, vllm_client, vllm_facts):
    answer = messages_answer(messages.request(vllm_facts.model))
    problems = messages.schema_problems(messages.MESSAGE_SCHEMA, answer)
    assert not problems, f"not Anthropic's Message shape ({str(answer)[:300]}):\n  " + "\n  ".join(problems)
    counted = vllm_client.post(messages.COUNT_TOKENS, {"model": vllm_facts.model, "messages": messages.PROMPT})
    tokens = (counted.json_or_none() or {}).get("input_tokens") if counted.status == 200 else counted.describe()
    assert tokens == answer["usage"]["input_tokens"], (
        f"usage.input_tokens {answer['usage']['input_tokens']} but count_tokens counts {tokens!r} for the same messages"
    )


@contract("agent_loops.messages_stream_is_the_answer")
def test_messages_stream_is_the_answer(messages_answer, vllm_facts):
    body = messages.request(vllm_facts.model)
    whole, stream = messages_answer(body), messages_answer(body, stream=True)
    problems = messages.event_problems(stream)
    assert not problems, "not Anthropic's event sequence:\n  " + "\n  ".join(problems)
    streamed, unstreamed = messages.reassembled(stream), messages.unstreamed(whole)
    assert streamed == unstreamed, (
        f"the stream adds up to {streamed}, the same greedy request unstreamed to {unstreamed}"
    )


@contract("agent_loops.messages_errors_in_anthropic_envelope")
def test_messages_errors_in_anthropic_envelope(vllm_client, vllm_facts, error_envelopes, vllm_record, vllm_evidence):
    for name, body in messages.refused_requests(vllm_facts.model).items():
        expected = error_envelopes[name]
        response = vllm_client.post(messages.MESSAGES, body)
        problems = messages.schema_problems(messages.ENVELOPES[expected["envelope"]], response.json_or_none())
        assert response.status == expected["status"] and not problems, (
            f"{name}: expected {expected['status']} in {expected['envelope']}'s error envelope, got "
            f"{response.describe()} {response.text[:300]!r}:\n  " + "\n  ".join(problems)
        )
        if expected["envelope"] != "anthropic":
            vllm_record(f"messages_error_{name}", f"in {expected['envelope']}'s envelope: {expected['why']}")
    vllm_evidence.judged(len(error_envelopes), "refusals")


def _forced_call(turn: loop.Turn, what: str, uncalled, function: str | None = None) -> dict:
    """The turn's one function_call (of ``function``); no call fails, unless cut inside one (undecided)."""
    if not turn.calls:
        names = [function] if function else ["get_weather", "get_time"]
        undecided(uncalled(responses.message_text(turn.output), turn.cut, names, what, turn.kinds))
    assert len(turn.calls) == 1, f"{what}: expected one function_call item, got the items {turn.kinds}"
    call = turn.calls[0]
    assert isinstance(call.get("call_id"), str) and call["call_id"], f"{what}: a function_call without call_id: {call}"
    assert function is None or call.get("name") == function, f"{what}: a call of {call.get('name')!r}, not {function}"
    return call


@contract("agent_loops.responses_tool_loop_round_trips")
def test_responses_tool_loop_round_trips(responses_turn, uncalled, vllm_facts):
    model = vllm_facts.model
    first = responses_turn(loop.turn_request(model, loop.named("get_weather")), "the loop's forced call")
    given = _forced_call(first, "the loop's forced call", uncalled, "get_weather")
    history = loop.fed_back(first)
    second = responses_turn(loop.turn_request(model, loop.named("get_time"), history), "the turn after the output")
    answered = _forced_call(second, "the turn after the call output", uncalled, "get_time")
    assert answered["call_id"] != given["call_id"] and answered.get("id") != given.get("id"), (
        f"the second call (call_id {answered['call_id']!r}, id {answered.get('id')!r}) repeats the first's "
        f"(call_id {given['call_id']!r}, id {given.get('id')!r}), which the client echoed back: a client keying "
        "outputs by call_id cannot tell the calls apart"
    )


@contract("agent_loops.responses_unknown_call_output_refused")
def test_responses_unknown_call_output_refused(vllm_client, vllm_facts, vllm_expect, unknown_call_output):
    orphan = vllm_client.post(loop.RESPONSES, loop.orphan_request(vllm_facts.model))
    departure = vllm_expect.departure("responses_unknown_call_output")
    if departure is not None and orphan.status == unknown_call_output["status"]:
        known_departure(departure, f"a function_call_output naming no call was {unknown_call_output['handling']}")
    assert orphan.status == 400, (
        f"a function_call_output whose call_id no call of the input gave: expected 400, as OpenAI's API refuses "
        f"it, got {orphan.describe()} {orphan.text[:300]!r}"
    )
    message = error_message(orphan) or ""
    assert loop.UNKNOWN_CALL_ID in message, (
        f"the refusal of a call output naming no call does not name its call_id {loop.UNKNOWN_CALL_ID!r}: "
        f"{message[:300]!r}; a client cannot tell which output the server lost"
    )


@contract("agent_loops.responses_tool_choice_forms")
def test_responses_tool_choice_forms(responses_turn, uncalled, vllm_facts, vllm_evidence):
    model = vllm_facts.model
    required = responses_turn(loop.turn_request(model, "required"), "tool_choice required")
    none = responses_turn(loop.turn_request(model, "none"), "tool_choice none")
    assert not none.calls, f"tool_choice none answered with function_call items: {none.calls}"
    texts = [item for item in none.output if item.get("type") == "message"]
    assert texts, f"tool_choice none kept no message item (the content): only {none.kinds}"
    call = _forced_call(required, "tool_choice required", uncalled)
    assert call.get("name") in ("get_weather", "get_time"), f"tool_choice required called {call.get('name')!r}"
    vllm_evidence.judged(2, "tool_choice forms")


def _streamed_custom_call(stream, what: str, prefixes: dict[str, str], custom_tools: dict) -> dict:
    """The stream's one custom_tool_call. The forced tool's name is known from the request, so a server that
    forces it opens the item at once: a stream without one answered as if the tool were never sent."""
    output = [item for item in responses.final_output(stream) or [] if isinstance(item, dict)]
    kinds = [item.get("type") for item in output]
    if not output and responses.stream_cut(stream):
        undecided(f"{what}: the answer was cut at max_output_tokens before any item")
    calls = [item for item in output if item.get("type") == "custom_tool_call"]
    assert len(calls) == 1, (
        f"{what}: expected one custom_tool_call item, got the items {kinds}: answered as if the custom tool "
        f"was never sent (this release's facts: {custom_tools['why']})"
    )
    call = calls[0]
    assert isinstance(call.get("call_id"), str) and call["call_id"], f"{what}: a custom call without call_id: {call}"
    assert call.get("name") == responses.SHELL["name"] and isinstance(call.get("input"), str), (
        f"{what}: not a call of {responses.SHELL['name']} with a text input: {call}"
    )
    prefix = prefixes.get("custom_tool_call", "")
    assert str(call.get("id", "")).startswith(prefix), f"{what}: a custom call id {call.get('id')!r}, not {prefix}…"
    return call


@contract("agent_loops.responses_stream_custom_call_is_the_answer")
def test_responses_stream_custom_call_is_the_answer(
    responses_stream, item_prefixes, custom_tools, vllm_facts, vllm_evidence
):
    stream = responses_stream(responses.custom_call_request(vllm_facts.model))
    problems = responses.stream_problems(stream, item_prefixes)
    assert not problems, "the streamed custom tool call is not the final answer's:\n  " + "\n  ".join(problems)
    _streamed_custom_call(stream, "the streamed custom tool", item_prefixes, custom_tools)
    vllm_evidence.judged(1, "streamed custom tool calls")


@contract("agent_loops.responses_custom_tool_round_trips")
def test_responses_custom_tool_round_trips(
    responses_stream, responses_turn, uncalled, vllm_facts, item_prefixes, custom_tools, vllm_record, vllm_evidence
):
    model = vllm_facts.model
    first = responses_stream(loop.custom_turn_request(model))
    given = _streamed_custom_call(first, "the loop's forced custom tool", item_prefixes, custom_tools)
    history = loop.fed_back_output(responses.final_output(first) or [])
    after = "the turn after the custom tool's output"
    second = responses_turn(loop.turn_request(model, loop.named("get_time"), history, tools=loop.WITH_CUSTOM), after)
    answered = _forced_call(second, after, uncalled, "get_time")
    assert answered["call_id"] != given["call_id"], (
        f"the function call after the custom tool's output repeats its call_id {given['call_id']!r}, which the "
        "client echoed back: a client keying outputs by call_id cannot tell the calls apart"
    )
    vllm_record("custom_tool_input", repr(given["input"])[:200])
    vllm_evidence.judged(1, "custom tool loops")


@contract("agent_loops.responses_custom_tool_formats")
def test_responses_custom_tool_formats(vllm_client, vllm_facts, custom_tools, vllm_record, vllm_evidence):
    expected = custom_tools["grammar"]
    body = responses.custom_call_request(vllm_facts.model, responses.SHELL_BY_GRAMMAR)
    answer = vllm_client.post(loop.RESPONSES, body)
    parsed = answer.json_or_none()
    read = parsed if isinstance(parsed, dict) else {}
    kinds = [item.get("type") for item in read.get("output") or [] if isinstance(item, dict)]
    assert not (answer.status == 200 and "custom_tool_call" not in kinds), (
        f"a grammar-format custom tool was answered as if never sent (200 with only {kinds}), neither served nor "
        f"refused (this release's facts: {custom_tools['why']})"
    )
    if expected["handling"] == "refused":
        problem = loop.error_problem(answer)
        error = read.get("error")
        param = error.get("param") if isinstance(error, dict) else None
        assert answer.status == expected["status"] and problem is None and param == expected["parameter"], (
            f"a grammar-format custom tool: expected {expected['status']} in OpenAI's error envelope naming "
            f"{expected['parameter']}, got {answer.describe()} {answer.text[:300]!r} {problem or ''}"
        )
    else:
        assert answer.status == 200 and "custom_tool_call" in kinds, (
            f"a grammar-format custom tool: expected it {expected['handling']} as this release's facts say, got "
            f"{answer.describe()} with the items {kinds} {answer.text[:200]!r}"
        )
    vllm_record("custom_tool_grammar", f"{expected['handling']}: {custom_tools['why']}")
    vllm_evidence.judged(1, "grammar-format custom tools")


@contract("agent_loops.responses_previous_response_continues")
def test_responses_previous_response_continues(
    responses_turn, vllm_client, vllm_facts, vllm_expect, store_routes, vllm_record
):
    model = vllm_facts.model
    first = responses_turn(loop.text_turn(model, "Say hello.", store=True), "the first stored turn")
    stored = vllm_expect.declared("generation", "responses_store").value
    follow = loop.text_turn(model, "Say it again.", previous_response_id=first.body.get("id"))
    if not stored:
        answer = vllm_client.post(loop.RESPONSES, follow)
        problem = loop.error_problem(answer)
        assert 400 <= answer.status < 500 and problem is None, (
            f"without a response store, previous_response_id {first.body.get('id')!r} must be refused with a 4xx "
            f"in OpenAI's error envelope; got {answer.describe()} {answer.text[:300]!r} {problem or ''}"
        )
        vllm_record("previous_response_id", f"refused without a store: {answer.status}")
        return
    second = responses_turn(follow, "the turn continuing the stored one")
    earlier = (first.input_tokens() or 0) + (first.output_tokens() or 0)
    assert isinstance(second.input_tokens(), int) and second.input_tokens() > earlier, (
        f"the turn after previous_response_id reads {second.input_tokens()!r} input tokens, not more than the "
        f"earlier turn's {first.input_tokens()} input and {first.output_tokens()} output: it did not continue it"
    )
    read = vllm_client.get(loop.stored_path(first.body.get("id")))
    kept = read.json_or_none() if read.status == 200 else None
    assert isinstance(kept, dict) and loop.same_answer(kept, first.body), (
        f"GET {loop.stored_path(first.body.get('id'))} does not return the stored answer: {read.describe()} "
        f"{read.text[:300]!r}"
    )
    items = vllm_client.get(loop.stored_path(first.body.get("id")) + "/input_items")
    if store_routes["input_items"]:
        assert items.status == 200 and loop.has_input(items.json_or_none(), "Say hello."), (
            f"GET .../input_items does not list the stored input: {items.describe()} {items.text[:300]!r}"
        )
    else:
        vllm_record("input_items", f"not served at this release ({items.status}): {store_routes['why']}")


@contract("agent_loops.messages_tool_use_round_trips")
def test_messages_tool_use_round_trips(messages_answer, uncalled, vllm_client, vllm_facts, vllm_evidence):
    body = messages.tool_request(vllm_facts.model, "get_weather")
    first = messages_answer(body)
    if not messages.tool_uses(first):
        what, blocks = "the forced tool", messages.blocks(first)
        undecided(uncalled(*messages.uncalled_of(first), ["get_weather"], what, blocks, "max_tokens"))
    problems = messages.tool_use_problems(first, "get_weather")
    assert not problems, "the forced tool is not one tool_use block:\n  " + "\n  ".join(problems)
    count = vllm_client.post(messages.COUNT_TOKENS, messages.counted(body))
    tokens = (count.json_or_none() or {}).get("input_tokens") if count.status == 200 else count.describe()
    assert tokens == first["usage"]["input_tokens"], (
        f"usage.input_tokens {first['usage']['input_tokens']} but count_tokens counts {tokens!r} for the same "
        "messages and tools"
    )
    history = messages.fed_back(first, TOOL_RESULT)
    second = messages_answer(messages.tool_request(vllm_facts.model, "get_time", history))
    if not messages.tool_uses(second):
        what = "the call after the tool_result"
        undecided(uncalled(*messages.uncalled_of(second), ["get_time"], what, messages.blocks(second), "max_tokens"))
    problems = messages.tool_use_problems(second, "get_time")
    assert not problems, "the turn after the tool_result is not one tool_use block:\n  " + "\n  ".join(problems)
    given, answered = messages.tool_uses(first)[0]["id"], messages.tool_uses(second)[0]["id"]
    assert answered != given, (
        f"the second tool_use's id {answered!r} is the first's, which the client echoed as tool_use_id: "
        "a client keying tool results by id cannot tell the calls apart"
    )
    vllm_evidence.judged(1, "tool_use loops")


@contract("agent_loops.responses_request_shapes")
def test_responses_request_shapes(responses_turn, vllm_client, vllm_facts, vllm_evidence):
    model = vllm_facts.model
    answered = responses_turn(shapes.history_request(model), "system, developer and assistant history items")
    problem = shapes.answer_problem(answered.output, answered.cut)
    assert problem is None, problem
    refusals = {"an input_image on a text-only model": shapes.image_request, "input 5": shapes.invalid_request}
    for what, build in refusals.items():
        refused = vllm_client.post(loop.RESPONSES, build(model))
        problem = loop.error_problem(refused)
        assert refused.status == 400 and problem is None, (
            f"{what}: expected 400 in OpenAI's error envelope, got {refused.describe()} {refused.text[:300]!r} "
            f"{problem or ''}"
        )
    vllm_evidence.judged(1 + len(refusals), "request shapes")


@contract("agent_loops.responses_item_status_consistent")
def test_responses_item_status_consistent(responses_turn, vllm_facts, vllm_expect, vllm_record, vllm_evidence):
    cut_status = vllm_expect.fact("responses_incomplete_item_status")
    whole = responses_turn(responses.text_request(vllm_facts.model), "a text answer")
    cut = responses_turn(shapes.cut_request(vllm_facts.model), "an answer cut at 2 tokens")
    if cut.body.get("status") != "incomplete":
        undecided(f"the answer cut at 2 output tokens came back {cut.body.get('status')!r}, not incomplete")
    problems = shapes.status_problems(whole.body, cut_status["status"]) + shapes.status_problems(
        cut.body, cut_status["status"]
    )
    assert not problems, "an item's status contradicts its response's:\n  " + "\n  ".join(problems)
    cut_item = shapes.cut_item_status(cut.body)
    if cut_item != shapes.CUT and cut_item == cut_status["status"]:
        vllm_record("incomplete_item_status", f"{cut_item} in an incomplete response: {cut_status['why']}")
    judged = shapes.with_status(whole.body) + shapes.with_status(cut.body)
    vllm_evidence.judged(judged, "output items", missing="no output item carries a status")
