"""The SDK suite's reading of a parsed answer: a reasoning model's answer cut while it thinks is an answer.

Built as the SDKs build them (``construct``, as they parse a server's JSON), from the bodies vLLM 0.32 sends
behind ``--reasoning-parser``: chat's content null beside ``reasoning``, Anthropic's thinking blocks.
"""

from __future__ import annotations

import pytest
from openai.types.chat import ChatCompletionMessage

from suites.sdk import parsed_answers as sdk

anthropic_types = pytest.importorskip("anthropic.types")
FIELD = {"field": "reasoning", "former": ["reasoning_content"]}  # fact reasoning_output_field


def chat_message(**fields):
    return ChatCompletionMessage.model_validate({"role": "assistant", **fields})


def test_chat_content_is_text_or_null_only_in_an_answer_cut_while_it_reasons():
    assert sdk.content_problem(chat_message(content="Red."), "stop", FIELD) is None
    assert sdk.content_problem(chat_message(content=None, reasoning="The city"), "length", FIELD) is None
    assert sdk.content_problem(chat_message(content=None, reasoning_content="The city"), "length", FIELD) is None
    # A relay that drops the reasoning, or an answer that stopped on its own, has lost its content.
    lost = sdk.content_problem(chat_message(content=None), "length", FIELD)
    assert lost == (
        "the answer's content is None (finish_reason 'length', reasoning {'reasoning': None, 'reasoning_content': "
        "None}): only an answer cut at max_tokens while it reasons may have no content"
    )
    assert sdk.content_problem(chat_message(content=None, reasoning="The city"), "stop", FIELD) is not None


def anthropic_message(stop_reason, *blocks):
    return anthropic_types.Message.construct(
        id="msg_1",
        type="message",
        role="assistant",
        model="m",
        content=[
            anthropic_types.TextBlock.construct(**block)
            if block["type"] == "text"
            else anthropic_types.ThinkingBlock.construct(**block)
            for block in blocks
        ],
        stop_reason=stop_reason,
    )


THINKING = {"type": "thinking", "thinking": "The city", "signature": ""}
TEXT = {"type": "text", "text": "Two rivers."}


def test_anthropic_blocks_are_text_after_thinking_or_thinking_alone_in_a_cut_answer():
    assert sdk.blocks_problem(anthropic_message("end_turn", TEXT), "message") is None
    assert sdk.blocks_problem(anthropic_message("end_turn", THINKING, TEXT), "message") is None
    assert sdk.blocks_problem(anthropic_message("max_tokens", THINKING), "message") is None
    redacted = anthropic_types.RedactedThinkingBlock.construct(type="redacted_thinking", data="c2VjcmV0")
    hidden = anthropic_message("end_turn", TEXT)
    hidden.content.insert(0, redacted)
    assert sdk.blocks_problem(hidden, "message") is None
    assert sdk.text_of(anthropic_message("end_turn", THINKING, TEXT)) == "Two rivers."
    assert sdk.blocks_problem(anthropic_message("end_turn", THINKING), "message") == (
        "the message holds only ['thinking'] blocks and stopped with 'end_turn': no text, yet not cut at max_tokens"
    )
    empty = sdk.blocks_problem(anthropic_message("end_turn"), "message")
    assert empty == "the message's content blocks are [], not text"
    assert sdk.blocks_problem(anthropic_message("max_tokens", {**THINKING, "thinking": None}), "message") == (
        "a thinking block of the message holds None, not text"
    )
    tool = anthropic_types.ToolUseBlock.construct(type="tool_use", id="t", name="f", input={})
    message = anthropic_message("end_turn", TEXT)
    message.content.append(tool)
    assert sdk.blocks_problem(message, "message") == "the message's content blocks are ['text', 'tool_use'], not text"
