"""The rendering corpus: one conversation per branch a chat template takes.

Each entry is the body of a ``/tokenize`` request beside ``model`` and
``return_token_strs``. Changing any of them changes every capture's
rendering, so ``CORPUS_VERSION`` names the corpus and a capture of another
corpus is not compared conversation by conversation.
"""

from __future__ import annotations

from typing import Any

CORPUS_VERSION = 1

_SYSTEM = "You are a terse assistant. Answer in one sentence."
_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
_TOOL_CALL = {
    "id": "call_render_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
# About 250 tokens on a small BPE: long enough for a template that truncates or reorders a long
# system prompt to show it, short enough for a 512-token context.
_LONG_SYSTEM = " ".join(
    f"Rule {n}: keep answers short, cite the source, and never repeat the question." for n in range(1, 13)
)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


# name -> the /tokenize request's fields (besides model and return_token_strs).
CONVERSATIONS: dict[str, dict[str, Any]] = {
    "system prompt": {"messages": [{"role": "system", "content": _SYSTEM}, _user("What is the capital of France?")]},
    "multi-turn": {
        "messages": [
            _user("Name a colour."),
            _assistant("Blue."),
            _user("Another one?"),
            _assistant("Green."),
            _user("And a third?"),
        ]
    },
    "tool definitions": {"messages": [_user("Weather in Paris?")], "tools": [_WEATHER_TOOL]},
    "tool call and result": {
        "messages": [
            _user("Weather in Paris?"),
            {"role": "assistant", "content": None, "tool_calls": [_TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call_render_1", "content": '{"temperature_c": 18}'},
        ],
        "tools": [_WEATHER_TOOL],
    },
    "assistant prefill": {
        "messages": [_user("Count to five."), _assistant("One, two,")],
        "add_generation_prompt": False,
        "continue_final_message": True,
    },
    "no generation prompt": {"messages": [_user("Hello."), _assistant("Hi.")], "add_generation_prompt": False},
    "template kwargs": {
        "messages": [_user("Think about 2 + 2.")],
        "chat_template_kwargs": {"enable_thinking": False},
    },
    "reasoning history": {
        "messages": [
            _user("What is 2 + 2?"),
            _assistant("4.", reasoning="Two plus two is four."),
            _user("And 3 + 3?"),
        ]
    },
    "non-ASCII": {"messages": [_user("Traduis « naïve café » en 日本語, s'il te plaît 🙂 — merci!")]},
    "long system prompt": {"messages": [{"role": "system", "content": _LONG_SYSTEM}, _user("Summarise the rules.")]},
}
