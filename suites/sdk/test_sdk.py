"""The official OpenAI Python SDK, and Anthropic's on /v1/messages, as applications call them, work against the server.

Applications reach vLLM through the SDK, not raw HTTP: a renamed field or a
stream framed differently breaks them while every route still answers 200.
The SDK here has the run's byte cap and timeout. Only the structure of an
answer is checked, never its wording; a reasoning model's answer cut while it
still thinks may hold only its reasoning (parsed_answers.py).
"""

import pytest

from pytest_vllm_conformance import contract
from pytest_vllm_conformance.protocol.generation_routes import STOP_REASONS

from . import parsed_answers

MAX_TOKENS = 8
PROMPT = "Name three colours."


def _usage_adds_up(usage, what):
    assert usage is not None, f"the {what} carries no usage"
    assert 0 < usage.completion_tokens <= MAX_TOKENS, (
        f"the {what} reports {usage.completion_tokens} completion tokens for max_tokens={MAX_TOKENS}"
    )
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, (
        f"the {what}'s usage does not add up: {usage.prompt_tokens} prompt + {usage.completion_tokens} "
        f"completion != {usage.total_tokens} total"
    )


@contract("sdk.lists_model")
def test_lists_model(vllm_openai, vllm_facts):
    ids = [model.id for model in vllm_openai.models.list()]
    assert vllm_facts.model in ids, f"the OpenAI SDK sees {ids}, not {vllm_facts.model!r}"


@contract("sdk.completion_parses")
def test_completion_parses(vllm_openai, vllm_facts):
    completion = vllm_openai.completions.create(
        model=vllm_facts.model, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0
    )
    assert len(completion.choices) == 1, f"expected one choice, got {len(completion.choices)}"
    choice = completion.choices[0]
    assert isinstance(choice.text, str), f"the choice's text is {choice.text!r}"
    assert choice.finish_reason in ("stop", "length"), f"finish_reason is {choice.finish_reason!r}"
    _usage_adds_up(completion.usage, "completion")


@contract("sdk.chat_parses")
def test_chat_parses(vllm_openai, vllm_facts, vllm_expect):
    chat = vllm_openai.chat.completions.create(
        model=vllm_facts.model, messages=[{"role": "user", "content": PROMPT}], max_tokens=MAX_TOKENS
    )
    assert len(chat.choices) == 1, f"expected one choice, got {len(chat.choices)}"
    message = chat.choices[0].message
    assert message.role == "assistant", f"the answer's role is {message.role!r}, not 'assistant'"
    problem = parsed_answers.content_problem(
        message, chat.choices[0].finish_reason, vllm_expect.fact("reasoning_output_field")
    )
    assert problem is None, problem
    assert chat.choices[0].finish_reason in ("stop", "length"), f"finish_reason is {chat.choices[0].finish_reason!r}"
    _usage_adds_up(chat.usage, "chat completion")


@contract("sdk.chat_stream_parses")
def test_chat_stream_parses(vllm_openai, vllm_facts):
    stream = vllm_openai.chat.completions.create(
        model=vllm_facts.model,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    finish_reasons = [choice.finish_reason for chunk in chunks for choice in chunk.choices if choice.finish_reason]
    assert finish_reasons in (["stop"], ["length"]), f"the stream's finish reasons are {finish_reasons}"
    assert chunks and chunks[-1].usage is not None and not chunks[-1].choices, (
        "asked for stream_options.include_usage, but the stream does not end with a usage chunk"
    )
    _usage_adds_up(chunks[-1].usage, "stream")


# ---- Anthropic's SDK on /v1/messages (Claude Code and the Anthropic SDK's route) ----


def _message_holds(message, what):
    assert message.type == "message" and message.role == "assistant", (
        f"the {what} is a {message.type!r} from {message.role!r}, not an assistant message"
    )
    problem = parsed_answers.blocks_problem(message, what)
    assert problem is None, problem
    assert message.stop_reason in STOP_REASONS, f"the {what}'s stop_reason {message.stop_reason!r} is not Anthropic's"
    assert 0 < message.usage.output_tokens <= MAX_TOKENS, (
        f"the {what} reports {message.usage.output_tokens} output tokens for max_tokens={MAX_TOKENS}"
    )


@contract("sdk.anthropic_message_parses")
def test_anthropic_message_parses(vllm_anthropic, vllm_facts):
    messages = [{"role": "user", "content": PROMPT}]
    message = vllm_anthropic.messages.create(model=vllm_facts.model, messages=messages, max_tokens=MAX_TOKENS)
    _message_holds(message, "message")
    counted = vllm_anthropic.messages.count_tokens(model=vllm_facts.model, messages=messages)
    assert counted.input_tokens == message.usage.input_tokens, (
        f"count_tokens says {counted.input_tokens} input tokens, the message {message.usage.input_tokens}"
    )


@contract("sdk.anthropic_stream_parses")
def test_anthropic_stream_parses(vllm_anthropic, vllm_facts):
    with vllm_anthropic.messages.stream(
        model=vllm_facts.model, messages=[{"role": "user", "content": PROMPT}], max_tokens=MAX_TOKENS
    ) as stream:
        streamed = "".join(stream.text_stream)
        try:
            final = stream.get_final_message()
        except AssertionError:  # the SDK's own check: it skips events until a message_start opens a message
            pytest.fail("Anthropic's SDK assembled no message from the stream: no message_start", pytrace=False)
    _message_holds(final, "streamed message")
    text = parsed_answers.text_of(final)
    assert streamed == text, f"the events carry {streamed!r}, the final message {text!r}"
