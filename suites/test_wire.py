"""Every answer has OpenAI's shape, and every stream is framed as OpenAI clients parse it.

Typed SDKs in other languages, gateways that parse SSE and dashboards that
read ``usage`` break on the body, not the status: a field turned null, a
usage chunk that moved, a second ``[DONE]``. Each request is sent once and
judged against our JSON Schemas of OpenAI's answers (compiled once per run)
and, for streams, against the framing the SDKs rely on. vLLM's deliberate
deviations for the server's version are reported (``vllm_wire_report``), and
fail only when the profile sets ``wire.strict_openai``. Shapes only, never wording.
"""

import pytest

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.features import wire
from pytest_vllm_conformance.features.wire import errors, responses_stream
from pytest_vllm_conformance.features.wire import stream as sse


@pytest.fixture(scope="module")
def rules(vllm_expect):
    return wire.rules_for(vllm_expect)


@pytest.fixture(scope="module")
def answer(vllm_client, vllm_facts):
    """Send each exchange once per module; its shape and framing contracts judge the same answer."""
    seen = {}

    def answer(exchange):
        if exchange.id not in seen:
            model = exchange.extra.get("model", vllm_facts.model)
            seen[exchange.id] = vllm_client.post(exchange.path, exchange.body(model))
        return seen[exchange.id]

    return answer


@pytest.fixture
def hold(rules, vllm_record):
    """Judge bodies as one answer kind: record what is reported, fail on what breaks OpenAI's shape."""

    def hold(response, answer_kind, bodies):
        failures, reported = rules.verdict(answer_kind, bodies)
        if reported:
            vllm_record("wire_report", "; ".join(reported))
            vllm_record("figures", f"{len(reported)} reported: " + "; ".join(reported))
        assert not failures, f"{response.describe()}: not OpenAI's {answer_kind} shape:\n  " + "\n  ".join(failures)

    return hold


def _json(response, status=200):
    assert response.status == status, f"expected {status}: {response.describe()} {response.text[:200]!r}"
    return response.json()


def _events(response, *, named_events=False):
    assert response.status == 200, f"expected 200: {response.describe()} {response.text[:200]!r}"
    assert not response.truncated, f"{response.describe()}: the stream passed the byte cap"
    return sse.parse(response.body, named_events=named_events)


@contract("wire.models_shape")
def test_models_shape(vllm_client, hold):
    response = vllm_client.get("/v1/models")
    hold(response, "models", [("", _json(response))])


@contract("wire.completion_shape")
@each("exchange", wire.completion_exchanges)
def test_completion_shape(exchange, answer, hold):
    response = answer(exchange)
    hold(response, exchange.answer, [("", _json(response))])


@contract("wire.chat_shape")
@each("exchange", wire.chat_exchanges)
def test_chat_shape(exchange, answer, hold):
    response = answer(exchange)
    hold(response, exchange.answer, [("", _json(response))])


@contract("wire.embeddings_shape")
@each("exchange", wire.embedding_exchanges)
def test_embeddings_shape(exchange, answer, hold):
    response = answer(exchange)
    hold(response, exchange.answer, [("", _json(response))])


@contract("wire.error_shape")
@each("exchange", wire.error_exchanges)
def test_error_shape(exchange, answer, hold):
    response = answer(exchange)
    hold(response, exchange.answer, [("", _json(response, 404))])


@contract("wire.stream_errors_before_streaming")
@each("probe", errors.prestream_probes)
def test_stream_errors_before_streaming(probe, vllm_client, vllm_facts, rules, vllm_record):
    response = vllm_client.post(probe.path, probe.body(vllm_facts.model, vllm_facts.max_model_len))
    failure, known = errors.prestream_verdict(rules, probe, response)
    if known:
        vllm_record("wire_report", known)
        vllm_record("figures", known)
    assert not failure, failure


@contract("wire.error_status_map")
@each("probe", errors.error_probes)
def test_error_status_map(probe, vllm_client, vllm_facts, rules, vllm_record):
    response = vllm_client.request(probe.method, probe.path, **probe.request(vllm_facts.model))
    failures, reported = errors.status_map_verdict(rules, probe, response)
    if reported:
        vllm_record("wire_report", "; ".join(reported))
        vllm_record("figures", "; ".join(reported))
    assert not failures, f"{probe}: {response.describe()} {response.text[:300]!r}:\n  " + "\n  ".join(failures)


def _stream_shape(exchange, answer, hold):
    response = answer(exchange)
    events = _events(response)
    hold(response, exchange.answer, [(f"event {e.number} ", e.payload) for e in events.chunks()])


@contract("wire.completion_stream_shape")
@each("exchange", wire.completion_stream_exchanges)
def test_completion_stream_shape(exchange, answer, hold):
    _stream_shape(exchange, answer, hold)


@contract("wire.chat_stream_shape")
@each("exchange", wire.chat_stream_exchanges)
def test_chat_stream_shape(exchange, answer, hold):
    _stream_shape(exchange, answer, hold)


def _framing_problems(exchange, events):
    tokens = sse.streamed_tokens(events, chat=exchange.chat) if exchange.logprobs else None
    problems = [*events.problems, *sse.finish_problems(events)]
    problems += sse.usage_problems(
        events, asked=exchange.include_usage, max_tokens=wire.MAX_TOKENS, tokens_streamed=tokens
    )
    if exchange.logprobs:
        problems += sse.logprob_problems(events, chat=exchange.chat)
    return problems


@contract("wire.completion_stream_framing")
@each("exchange", wire.completion_stream_exchanges)
def test_completion_stream_framing(exchange, answer):
    response = answer(exchange)
    problems = _framing_problems(exchange, _events(response))
    assert not problems, f"{response.describe()}: framed as OpenAI clients cannot parse:\n  " + "\n  ".join(problems)


@contract("wire.chat_stream_framing")
@each("exchange", wire.chat_stream_exchanges)
def test_chat_stream_framing(exchange, answer):
    response = answer(exchange)
    events = _events(response)
    problems = [*_framing_problems(exchange, events), *sse.role_problems(events)]
    assert not problems, f"{response.describe()}: framed as OpenAI clients cannot parse:\n  " + "\n  ".join(problems)


@contract("wire.stream_continuous_usage")
@each("exchange", wire.continuous_usage_exchanges)
def test_stream_continuous_usage(exchange, answer):
    response = answer(exchange)
    # The usage only: the SSE framing itself ([DONE], data lines) is the framing contracts' to judge.
    problems = sse.continuous_usage_problems(_events(response), max_tokens=wire.MAX_TOKENS, chat=exchange.chat)
    assert not problems, f"{response.describe()}: usage not streamed as continuous_usage_stats asks:\n  " + "\n  ".join(
        problems
    )


@contract("wire.responses_shape")
@each("exchange", wire.responses_exchanges)
def test_responses_shape(exchange, answer, hold):
    response = answer(exchange)
    hold(response, exchange.answer, [("", _json(response))])


@contract("wire.responses_stream_shape")
@each("exchange", wire.responses_stream_exchanges)
def test_responses_stream_shape(exchange, answer, hold):
    response = answer(exchange)
    events = _events(response, named_events=True)
    hold(response, exchange.answer, [(f"event {e.number} ", e.payload) for e in events.chunks()])


@contract("wire.responses_stream_framing")
@each("exchange", wire.responses_stream_exchanges)
def test_responses_stream_framing(exchange, answer, rules, vllm_expect, vllm_record):
    response = answer(exchange)
    events = _events(response, named_events=True)
    terminal = vllm_expect.fact("wire_responses_terminal_event")
    failures, reported = responses_stream.framing_verdict(rules, terminal, events)
    if reported:
        vllm_record("wire_report", "; ".join(reported))
        vllm_record("figures", "; ".join(reported))
    assert not failures, f"{response.describe()}: framed as OpenAI's clients cannot read:\n  " + "\n  ".join(failures)
