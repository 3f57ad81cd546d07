"""Every answer has OpenAI's shape, and every stream is framed as OpenAI clients parse it.

Typed SDKs in other languages, gateways that parse SSE and dashboards that
read ``usage`` break on the body, not the status: a field turned null, a
usage chunk that moved, a second ``[DONE]``. Each request is sent once and
judged against our JSON Schemas of OpenAI's answers (compiled once per run)
and, for streams, against the framing the SDKs rely on. vLLM's deliberate
deviations for the server's version are reported (``vllm_wire_report``), and
fail only when the profile sets ``wire.strict_openai``. Shapes only, never wording.

The requests go where callers' go: through --vllm-ingress-url when given.
Then each is also sent straight to --vllm-url and judged the same way, so a
failure says whether the ingress introduced it, and what the ingress changed
in the answer is recorded (``vllm_wire_ingress_changes``, through_ingress.py);
a request the ingress answers with its own 404/405 is "not exposed by the ingress"
when the profile declares its route hidden (ingress.hidden_routes), else a failure.
"""

import functools

import pytest

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.observed.wire_requests import MAX_TOKENS

from . import errors, exchanges, responses_stream, stream_framing
from .judging import framing, judge_where_callers_go, send, shape_judge, stream_judge
from .wire_rules import rules_for


@pytest.fixture(scope="module")
def rules(vllm_expect):
    return rules_for(vllm_expect)


@pytest.fixture(scope="module")
def sent():
    """``sent(client, what, ask)``: ``ask(client)``, once per module and client (shape and framing judge one answer)."""
    seen = {}

    def sent(client, what, ask):
        if (id(client), what) not in seen:
            seen[id(client), what] = ask(client)
        return seen[id(client), what]

    return sent


@pytest.fixture
def judged(
    sent, vllm_ingress_client, vllm_direct_client, vllm_ingress_exposure, vllm_not_exposed, vllm_record, vllm_evidence
):
    """``judged(what, ask, judge)``: the answer callers get to ``ask(client)``'s request, judged by ``judge``.

    Reports what is reported; fails on what breaks OpenAI's shape. Through
    an ingress, the server's answer to the same request is judged too, to
    attribute a failure and record what the ingress changed.
    """

    def judged(what, ask, judge):
        def ask_once(client):
            return sent(client, what, ask)

        judge_where_callers_go(
            ask_once,
            judge,
            ingress_client=vllm_ingress_client,
            direct_client=vllm_direct_client,
            separate=vllm_ingress_exposure.separate,
            hidden=lambda answer: vllm_not_exposed(what, ask_once, answer),
            record=vllm_record,
            judged=vllm_evidence.judged,
        )

    return judged


@pytest.fixture
def shape(rules):
    """``shape(kind, status=200, stream=False, named_events=False)``: a judge of the body (each event's, for a
    stream) as ``kind``."""
    return functools.partial(shape_judge, rules)


@contract("wire.models_shape")
def test_models_shape(judged, shape):
    judged("GET /v1/models", lambda client: client.get("/v1/models"), shape("models"))


@contract("wire.completion_shape")
@each("exchange", exchanges.completion_exchanges)
def test_completion_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", send(exchange, vllm_facts.model), shape(exchange.answer))


@contract("wire.chat_shape")
@each("exchange", exchanges.chat_exchanges)
def test_chat_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", send(exchange, vllm_facts.model), shape(exchange.answer))


@contract("wire.embeddings_shape")
@each("exchange", exchanges.embedding_exchanges)
def test_embeddings_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", send(exchange, vllm_facts.model), shape(exchange.answer))


@contract("wire.error_shape")
@each("exchange", exchanges.error_exchanges)
def test_error_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", send(exchange, vllm_facts.model), shape(exchange.answer, status=404))


@contract("wire.stream_errors_before_streaming")
@each("probe", errors.prestream_probes)
def test_stream_errors_before_streaming(probe, judged, vllm_facts, rules):
    body = probe.body(vllm_facts.model, vllm_facts.max_model_len)
    judged(
        f"POST {probe} (streamed)",
        lambda client: client.post(probe.path, body),
        lambda response: errors.prestream_verdict(rules, probe, response),
    )


@contract("wire.error_status_map")
@each("probe", errors.error_probes)
def test_error_status_map(probe, judged, vllm_facts, rules):
    request = probe.request(vllm_facts.model)
    judged(
        str(probe),
        lambda client: client.request(probe.method, probe.path, **request),
        lambda response: errors.status_map_verdict(rules, probe, response),
    )


@contract("wire.completion_stream_shape")
@each("exchange", exchanges.completion_stream_exchanges)
def test_completion_stream_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", send(exchange, vllm_facts.model), shape(exchange.answer, stream=True))


@contract("wire.chat_stream_shape")
@each("exchange", exchanges.chat_stream_exchanges)
def test_chat_stream_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", send(exchange, vllm_facts.model), shape(exchange.answer, stream=True))


@contract("wire.completion_stream_framing")
@each("exchange", exchanges.completion_stream_exchanges)
def test_completion_stream_framing(exchange, judged, vllm_facts):
    judged(f"POST {exchange}", send(exchange, vllm_facts.model), framing(exchange))


@contract("wire.chat_stream_framing")
@each("exchange", exchanges.chat_stream_exchanges)
def test_chat_stream_framing(exchange, judged, vllm_facts):
    judged(f"POST {exchange}", send(exchange, vllm_facts.model), framing(exchange))


@contract("wire.stream_continuous_usage")
@each("exchange", exchanges.continuous_usage_exchanges)
def test_stream_continuous_usage(exchange, judged, vllm_facts):
    # The usage only: the SSE framing itself ([DONE], data lines) is the framing contracts' to judge.
    @stream_judge("usage not streamed as continuous_usage_stats asks")
    def judge(events):
        return stream_framing.continuous_usage_problems(events, max_tokens=MAX_TOKENS, chat=exchange.chat)

    judged(f"POST {exchange}", send(exchange, vllm_facts.model), judge)


@contract("wire.responses_shape")
@each("exchange", exchanges.responses_exchanges)
def test_responses_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", send(exchange, vllm_facts.model), shape(exchange.answer))


@contract("wire.responses_stream_shape")
@each("exchange", exchanges.responses_stream_exchanges)
def test_responses_stream_shape(exchange, judged, shape, vllm_facts):
    judge = shape(exchange.answer, stream=True, named_events=True)
    judged(f"POST {exchange}", send(exchange, vllm_facts.model), judge)


@contract("wire.responses_stream_framing")
@each("exchange", exchanges.responses_stream_exchanges)
def test_responses_stream_framing(exchange, judged, rules, vllm_expect, vllm_facts):
    terminal = vllm_expect.release.wire_responses_terminal_event

    @stream_judge("framed as OpenAI's clients cannot read", named_events=True)
    def judge(events):
        return responses_stream.framing_verdict(rules, terminal, events)

    judged(f"POST {exchange}", send(exchange, vllm_facts.model), judge)
