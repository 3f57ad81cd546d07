"""vLLM's generation routes, in one table: where each is, what its body takes, how its stream is framed, and where
its answer puts the generated text.

The features name a route from here rather than spelling its path: the wire
suite's requests, token accounting, reasoning across routes, the watermark's
sampled APIs, the tool-call and agent-loop requests. What a route does per
release (since when it is served, which extensions it takes) stays contract
data; this table is only the OpenAI and Anthropic shapes the routes share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GenerationRoute:
    name: str
    path: str
    prompt_field: str  # where the prompt goes: "prompt" (text), "messages" (a conversation), "input" (Responses)
    max_tokens_field: str  # the field that bounds the answer's length
    chat: bool  # the prompt is rendered through the chat template
    named_events: bool  # its stream names each event on an `event:` line and ends without `data: [DONE]`

    def __str__(self) -> str:
        return f"POST {self.path}"

    def text(self, payload: Any) -> str | None:
        """The generated text of a whole answer (choice 0, the output text parts, the text blocks); None when the
        answer is not this route's."""
        try:
            if self is COMPLETIONS:
                return payload["choices"][0]["text"]
            if self is CHAT:
                return payload["choices"][0]["message"]["content"]
            if self is RESPONSES:
                parts = [part for item in payload["output"] for part in item.get("content") or []]
                return "".join(part["text"] for part in parts if part.get("type") == "output_text")
            if self is MESSAGES:
                return "".join(block["text"] for block in payload["content"] if block.get("type") == "text")
        except (KeyError, IndexError, TypeError):
            return None
        return None


COMPLETIONS = GenerationRoute("completions", "/v1/completions", "prompt", "max_tokens", chat=False, named_events=False)
CHAT = GenerationRoute("chat", "/v1/chat/completions", "messages", "max_tokens", chat=True, named_events=False)
RESPONSES = GenerationRoute("responses", "/v1/responses", "input", "max_output_tokens", chat=True, named_events=True)
MESSAGES = GenerationRoute("messages", "/v1/messages", "messages", "max_tokens", chat=True, named_events=True)
GENERATION_ROUTES = (COMPLETIONS, CHAT, RESPONSES, MESSAGES)
EMBEDDINGS = "/v1/embeddings"  # not a generation route: the wire suite judges its answer's shape too
# Nor this: a classifier's (or a cross-encoder's) one model route with a plain input, where the wire suite asks
# for an unknown model on a server that serves no other.
CLASSIFY = "/classify"
# What an Anthropic message (/v1/messages) may stop with, from Anthropic's API reference: the agent loops' schema of
# the answer holds it, and the SDK suite checks the answer the Anthropic SDK parsed against it.
STOP_REASONS = ["end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"]
