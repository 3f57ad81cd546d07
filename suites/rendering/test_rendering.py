"""Rendering: the chat path renders each conversation of the corpus as ``/tokenize`` renders it.

A path that adds or loses a token (a second BOS, a dropped system prompt)
changes what the model sees without an error. Each conversation of the
rendering corpus (docs/rendering.md) is sent as a one-token greedy chat
request; its ``usage.prompt_tokens``, and its ``prompt_token_ids`` where the
version returns them, must equal ``/tokenize``'s rendering of the same
messages. A conversation both refuse with the same client error agrees; an
answer that says a route is out of reach (404, 503, none) says nothing of
the template, so the conversation is undecided.
"""

from pytest_vllm_conformance import contract, each, undecided

from .chat_path import chat_prompt_compared, corpus_conversations


@contract("rendering.chat_renders_as_tokenize")
@each("conversation", corpus_conversations)
def test_chat_renders_as_tokenize(conversation, vllm_client, vllm_facts, vllm_evidence):
    compared = chat_prompt_compared(vllm_client, vllm_facts.model, conversation)
    if compared.undecided:
        undecided(f"{conversation.name}: {compared.undecided}")
    assert not compared.problems, f"{conversation.name}: " + "; ".join(compared.problems)
    # Two answers came (the chat request's and /tokenize's); what was judged is one conversation on both paths.
    vllm_evidence.judged(1, "conversations rendered on both paths")
