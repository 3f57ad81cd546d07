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
in the answer is recorded (``vllm_wire_ingress_changes``, features/wire/ingress.py);
a request the ingress answers with its own 404/405 is "not exposed by the ingress".
"""

import pytest

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.features import wire
from pytest_vllm_conformance.features.wire import Verdict, errors, ingress, responses_stream
from pytest_vllm_conformance.features.wire import stream as sse


@pytest.fixture(scope="module")
def rules(vllm_expect):
    return wire.rules_for(vllm_expect)


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
def judged(sent, vllm_ingress_client, vllm_direct_client, vllm_ingress_exposure, vllm_not_exposed, vllm_record):
    """``judged(what, ask, judge)``: the answer callers get to ``ask(client)``'s request, judged by ``judge``.

    Reports what is reported; fails on what breaks OpenAI's shape. Through
    an ingress, the server's answer to the same request is judged too, to
    attribute a failure and record what the ingress changed.
    """

    def judged(what, ask, judge):
        def ask_once(client):
            return sent(client, what, ask)

        answer = ask_once(vllm_ingress_client)
        separate = vllm_ingress_exposure.separate
        if separate and vllm_not_exposed(what, ask_once, answer):
            return  # no caller reaches it through the ingress: nothing to judge there
        through = judge(answer)
        message, figures = through.message(), []
        if through.reported:
            vllm_record("wire_report", "; ".join(through.reported))
            figures.append(f"{len(through.reported)} reported: " + "; ".join(through.reported))
        if separate:
            direct = judge(ask_once(vllm_direct_client))
            message = ingress.attributed(through, direct)
            figures = [f"through the ingress, {line}" for line in figures]
            if changed := ingress.changes(through, direct):
                vllm_record("wire_ingress_changes", "; ".join(changed))
                figures.append("the ingress against vLLM straight: " + "; ".join(changed))
        if figures:
            vllm_record("figures", "; ".join(figures))
        assert not through.failures, message

    return judged


def _unreadable(response, status=200, stream=False):
    """Why the answer cannot be judged as the expected kind, or ""."""
    if response.status != status:
        return f"expected {status}, got {response.status}: {response.text[:200]!r}"
    if stream and response.truncated:
        return "the stream passed the byte cap"
    if not stream and not isinstance(response.json_or_none(), dict):
        return f"expected a JSON object: {response.text[:200]!r}"
    return ""


@pytest.fixture
def shape(rules):
    """``shape(kind, status=200, stream=False)``: a judge of the body (each event's, for a stream) as ``kind``.

    A Responses stream (``named_events``) has ``event:`` lines and no ``[DONE]``.
    """

    def shape(kind, status=200, stream=False, named_events=False):
        def judge(response):
            if problem := _unreadable(response, status, stream):
                return Verdict(response.describe(), response.status, [problem])
            if stream:
                events = sse.parse(response.body, named_events=named_events).chunks()
                bodies = [(f"event {e.number} ", e.payload) for e in events]
            else:
                bodies = [("", response.json())]
            return rules.verdict(kind, bodies, f"{response.describe()}: not OpenAI's {kind} shape", response.status)

        return judge

    return shape


def _send(exchange, model):
    return lambda client: client.post(exchange.path, exchange.body(exchange.extra.get("model", model)))


@contract("wire.models_shape")
def test_models_shape(judged, shape):
    judged("GET /v1/models", lambda client: client.get("/v1/models"), shape("models"))


@contract("wire.completion_shape")
@each("exchange", wire.completion_exchanges)
def test_completion_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), shape(exchange.answer))


@contract("wire.chat_shape")
@each("exchange", wire.chat_exchanges)
def test_chat_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), shape(exchange.answer))


@contract("wire.embeddings_shape")
@each("exchange", wire.embedding_exchanges)
def test_embeddings_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), shape(exchange.answer))


@contract("wire.error_shape")
@each("exchange", wire.error_exchanges)
def test_error_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), shape(exchange.answer, status=404))


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
@each("exchange", wire.completion_stream_exchanges)
def test_completion_stream_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), shape(exchange.answer, stream=True))


@contract("wire.chat_stream_shape")
@each("exchange", wire.chat_stream_exchanges)
def test_chat_stream_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), shape(exchange.answer, stream=True))


def framing(exchange):
    """A judge of a stream's framing as the SDKs parse it (and, for chat, the role on each choice's first delta)."""

    def judge(response):
        headline = f"{response.describe()}: framed as OpenAI clients cannot parse"
        if problem := _unreadable(response, stream=True):
            return Verdict(headline, response.status, [problem])
        events = sse.parse(response.body)
        tokens = sse.streamed_tokens(events, chat=exchange.chat) if exchange.logprobs else None
        problems = [*events.problems, *sse.finish_problems(events)]
        problems += sse.usage_problems(
            events, asked=exchange.include_usage, max_tokens=wire.MAX_TOKENS, tokens_streamed=tokens
        )
        if exchange.logprobs:
            problems += sse.logprob_problems(events, chat=exchange.chat)
        if exchange.chat:
            problems += sse.role_problems(events)
        return Verdict(headline, response.status, problems)

    return judge


@contract("wire.completion_stream_framing")
@each("exchange", wire.completion_stream_exchanges)
def test_completion_stream_framing(exchange, judged, vllm_facts):
    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), framing(exchange))


@contract("wire.chat_stream_framing")
@each("exchange", wire.chat_stream_exchanges)
def test_chat_stream_framing(exchange, judged, vllm_facts):
    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), framing(exchange))


@contract("wire.stream_continuous_usage")
@each("exchange", wire.continuous_usage_exchanges)
def test_stream_continuous_usage(exchange, judged, vllm_facts):
    def judge(response):
        # The usage only: the SSE framing itself ([DONE], data lines) is the framing contracts' to judge.
        headline = f"{response.describe()}: usage not streamed as continuous_usage_stats asks"
        if problem := _unreadable(response, stream=True):
            return Verdict(headline, response.status, [problem])
        events = sse.parse(response.body)
        problems = sse.continuous_usage_problems(events, max_tokens=wire.MAX_TOKENS, chat=exchange.chat)
        return Verdict(headline, response.status, problems)

    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), judge)


@contract("wire.responses_shape")
@each("exchange", wire.responses_exchanges)
def test_responses_shape(exchange, judged, shape, vllm_facts):
    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), shape(exchange.answer))


@contract("wire.responses_stream_shape")
@each("exchange", wire.responses_stream_exchanges)
def test_responses_stream_shape(exchange, judged, shape, vllm_facts):
    judge = shape(exchange.answer, stream=True, named_events=True)
    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), judge)


@contract("wire.responses_stream_framing")
@each("exchange", wire.responses_stream_exchanges)
def test_responses_stream_framing(exchange, judged, rules, vllm_expect, vllm_facts):
    terminal = vllm_expect.fact("wire_responses_terminal_event")

    def judge(response):
        headline = f"{response.describe()}: framed as OpenAI's clients cannot read"
        if problem := _unreadable(response, stream=True):
            return Verdict(headline, response.status, [problem])
        events = sse.parse(response.body, named_events=True)
        failures, reported = responses_stream.framing_verdict(rules, terminal, events)
        return Verdict(headline, response.status, failures, reported)

    judged(f"POST {exchange}", _send(exchange, vllm_facts.model), judge)
