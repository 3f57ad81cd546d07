"""Context length: /v1/models tells the truth, and the limit holds where it says.

Every prompt has an exact token length (token ids on completions, a chat
message measured with /tokenize, template included), so nothing depends on
how text tokenizes; every request asks for at most two greedy tokens, so the
suite stays fast on CPU. One token over the limit is where vLLM changed:
0.28-0.31 refuse, 0.32+ silently clamp max_tokens (fact ``context_overflow``);
the profile's ``context.max_tokens_clamp`` says whether a clamp is acceptable,
and without one the version's documented behaviour is.
"""

import pytest

from pytest_vllm_conformance import contract, each, fact_fixture

from .exact_prompts import PromptUnavailable, assert_refused_naming_the_limit, context_endpoints

OUTPUT_TOKENS = 2


@pytest.fixture(scope="module")
def max_model_len(vllm_facts):
    """The limit as /v1/models advertises it (the contracts need it reported): every boundary is placed there."""
    return vllm_facts.max_model_len


refusal = fact_fixture("context_limit_refusal")
overflow = fact_fixture("context_overflow")


@pytest.fixture(scope="module")
def clamp(vllm_expect):
    return vllm_expect.declared("context", "max_tokens_clamp")


@pytest.fixture
def generate(endpoint, vllm_client, vllm_facts):
    """``generate(prompt_tokens, max_tokens)`` on the case's endpoint; a skip when no such prompt can be built."""

    def generate(prompt_tokens, max_tokens):
        try:
            return endpoint.generate(vllm_client, vllm_facts.model, prompt_tokens, max_tokens)
        except PromptUnavailable as exc:
            pytest.skip(str(exc))

    return generate


@contract("context.max_model_len_as_declared")
def test_max_model_len_as_declared(vllm_facts, vllm_expect, vllm_evidence):
    declared = vllm_expect.declared("context", "max_model_len")
    vllm_evidence.judged(1, "/v1/models answers")
    reported = vllm_facts.max_model_len
    yarn = vllm_expect.release.yarn_max_model_len
    assert reported == declared.value, (
        f"/v1/models reports max_model_len {reported} for {vllm_facts.model!r}, expected {declared} "
        f"(without --max-model-len, {vllm_expect.version_label} derives a YaRN checkpoint's from {yarn['rule']})"
    )


@contract("context.request_at_limit_served")
@each("endpoint", context_endpoints)
def test_request_at_limit_served(endpoint, generate, max_model_len):
    at_limit = generate(max_model_len - OUTPUT_TOKENS, OUTPUT_TOKENS)
    assert at_limit.status == 200, (
        f"prompt + max_tokens = max_model_len {max_model_len} (from /v1/models) must be served: {at_limit}"
    )
    assert at_limit.served_prompt_tokens == at_limit.prompt_tokens, f"the server counted another prompt: {at_limit}"
    assert at_limit.completion_tokens == OUTPUT_TOKENS, (
        f"the server generated {at_limit.completion_tokens} of {OUTPUT_TOKENS} tokens at the limit "
        f"(ignore_eos set): it enforces less than max_model_len {max_model_len}: {at_limit}"
    )


@contract("context.request_over_limit_refused_or_clamped")
@each("endpoint", context_endpoints)
def test_request_over_limit_refused_or_clamped(endpoint, generate, max_model_len, refusal, clamp, overflow):
    over = generate(max_model_len - OUTPUT_TOKENS + 1, OUTPUT_TOKENS)
    if over.status != 200:
        assert_refused_naming_the_limit(over, max_model_len, refusal)
        return
    assert over.served_prompt_tokens is not None and over.completion_tokens is not None, (
        f"the answer carries no usage, so the tokens it served cannot be counted against max_model_len: {over}"
    )
    total = over.served_prompt_tokens + over.completion_tokens
    assert total <= max_model_len, f"the server generated past max_model_len {max_model_len} ({total} tokens): {over}"
    assert clamp.value == "allowed", (
        f"the server clamped max_tokens from {OUTPUT_TOKENS} to {over.completion_tokens} instead of refusing "
        f"prompt + max_tokens one token over max_model_len {max_model_len}, and max_tokens_clamp is {clamp} "
        f"({overflow['note']}): {over}"
    )


@contract("context.prompt_over_limit_refused")
@each("endpoint", context_endpoints)
def test_prompt_over_limit_refused(endpoint, generate, max_model_len, refusal):
    over = generate(max_model_len + 1, 1)
    if over.status == 200 and over.served_prompt_tokens is None:
        pytest.fail(
            f"a prompt over max_model_len {max_model_len} was served, and the answer carries no usage "
            f"to tell whether it was truncated: {over}",
            pytrace=False,
        )
    if over.status == 200 and over.served_prompt_tokens == over.prompt_tokens:
        pytest.fail(
            f"a prompt over max_model_len {max_model_len} was served whole: the server enforces more than "
            f"/v1/models advertises: {over}",
            pytrace=False,
        )
    assert over.status != 200, f"a prompt over max_model_len {max_model_len} was silently truncated: {over}"
    assert_refused_naming_the_limit(over, max_model_len, refusal)
