"""Rendering: the chat path renders each conversation of the corpus as ``/tokenize`` renders it.

A path that adds or loses a token (a second BOS, a dropped system prompt)
changes what the model sees without an error. Each conversation of the
rendering corpus (docs/rendering.md) is sent as a one-token greedy chat
request; its ``usage.prompt_tokens``, and its ``prompt_token_ids`` where the
version returns them, must equal ``/tokenize``'s rendering of the same
messages. A conversation both refuse agrees.
"""

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.features.rendering.accounting import chat_prompt_problems, corpus_conversations


@contract("rendering.chat_renders_as_tokenize")
@each("conversation", corpus_conversations)
def test_chat_renders_as_tokenize(conversation, vllm_client, vllm_facts):
    problems = chat_prompt_problems(vllm_client, vllm_facts.model, conversation)
    assert not problems, f"{conversation.name}: " + "; ".join(problems)
