"""The watermark suite's machinery: one sampled answer per API, client and opt-out, scored and cached.

``sample`` asks for an answer and scores it with the detector for the
declared watermark (token ids the API returns, else the answer's text
tokenized by the server); every answer is asked for once per module.
``plan`` sizes answers from a pilot answer through the ingress so that a
watermarked one reaches TARGET_P_VALUE with margin; ``sampled`` asks at the
planned length and records what it measured. suites/test_watermark.py
imports the fixtures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

import pytest

from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.features import watermark
from pytest_vllm_conformance.features.watermark import keys
from pytest_vllm_conformance.features.watermark.apis import GenerationApi
from pytest_vllm_conformance.features.watermark.planning import Plan, answer_length
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids

# A watermarked answer must reach this p-value, an unwatermarked one must not:
# either verdict is then wrong about once in a million answers.
TARGET_P_VALUE = 1e-6
PROMPT = "Write a long story about a lighthouse keeper, the sea and the ships that pass."
PILOT_TOKENS = 64
MIN_TOKENS = 64
MAX_TOKENS = 1024
PROMPT_ALLOWANCE = 64  # tokens of the context left for the prompt and chat template
SAFETY_SIGMAS = 3.0
REFUSALS = (400, 403, 422)  # an ingress that refuses the opt-out keeps it out too


@dataclass(frozen=True)
class Sample:
    """One answer, as the detector sees it."""

    token_ids: list[int] = field(repr=False)
    token_source: str
    p_value: float
    num_scored_tokens: int

    @property
    def watermarked(self) -> bool:
        return self.p_value <= TARGET_P_VALUE

    def __str__(self) -> str:
        return f"p={self.p_value:.3g} over {self.num_scored_tokens} scored tokens, {self.token_source}"


@pytest.fixture(scope="module")
def detector(vllm_expect, vllm_watermark_key):
    """The detector for the declared watermark (claimed where watermark.required is true, and the key given)."""
    algorithm = vllm_expect.declared("watermark", "algorithm").value
    options = {
        "context_width": vllm_expect.declared("watermark", "context_width").value,
        "p_value_threshold": TARGET_P_VALUE,
    }
    if algorithm == "dual_key_gumbel":
        options["alpha"] = vllm_expect.declared("watermark", "alpha").value
    return watermark.make_detector(algorithm, _parse_key(vllm_watermark_key.reveal()), **options)


def _parse_key(text: str) -> int:
    try:
        return keys.parse_key(text)
    except keys.InvalidKey as problem:
        pytest.fail(f"the watermark key {problem}", pytrace=False)  # the value is never echoed


@pytest.fixture(scope="module")
def sample(detector, vllm_client, vllm_facts):
    """Ask ``client`` for one sampled answer on ``api`` and score it; answers are cached per module."""
    answers = {}

    def tokenize(text, special):
        try:
            return token_ids(vllm_client, vllm_facts.model, prompt=text, add_special_tokens=special)
        except TokenizeUnavailable as exc:
            pytest.fail(f"cannot score answers: {exc}", pytrace=False)

    def sample(client, api, max_tokens, watermarking=None):
        if api.form:
            pytest.skip(
                f"cannot check {api}: its opt-out is a form field of an audio request, which this suite "
                "does not send; make sure the ingress removes it too"
            )
        key = (client.base_url, api.id, max_tokens, watermarking)
        if key not in answers:
            prompt_ids = tokenize(PROMPT, True) if api.shape == "generate" else None
            body = api.body(
                vllm_facts.model, PROMPT, max_tokens, watermarking=watermarking, prompt_token_ids=prompt_ids
            )
            response = client.post(api.path, body)
            answers[key] = (response, _score(detector, api, response, tokenize))
        return answers[key]

    return sample


def _score(detector, api, response, tokenize):
    if response.status != 200:
        return None
    payload = response.json()
    token_ids, source = api.generated_token_ids(payload), "token ids returned by the API"
    if token_ids is None:
        text = api.generated_text(payload)
        if text is None:
            pytest.fail(f"{api}: no generated token ids or text in the answer: {response.describe()}", pytrace=False)
        token_ids, source = tokenize(text, False), "answer text re-tokenized"
    found = detector.detect(token_ids)
    return Sample(token_ids, source, found.p_value, found.num_scored_tokens)


@pytest.fixture(scope="module")
def plan(detector, sample, vllm_ingress_client, vllm_facts):
    """``plan(api)``: how many tokens an answer on ``api`` needs, from a pilot answer through the ingress."""
    cap = min(MAX_TOKENS, (vllm_facts.max_model_len or 2048) - PROMPT_ALLOWANCE)
    plans = {}

    def plan(api):
        if api.id not in plans:
            response, pilot = sample(vllm_ingress_client, api, PILOT_TOKENS)
            if pilot is None:
                plans[api.id] = Plan(cap, f"no usable pilot ({response.describe()}): the most the context allows")
            else:
                plans[api.id] = answer_length(
                    detector,
                    pilot.token_ids,
                    pilot.num_scored_tokens,
                    target_p_value=TARGET_P_VALUE,
                    cap=cap,
                    min_tokens=MIN_TOKENS,
                    safety_sigmas=SAFETY_SIGMAS,
                )
        return plans[api.id]

    return plan


@pytest.fixture
def sampled(sample, plan, vllm_record):
    """``sampled(client, api, watermarking=None) -> (response, Sample | None)``, reported as properties."""

    def sampled(client, api, watermarking=None):
        planned = plan(api)
        vllm_record("watermark_planned_tokens", planned.tokens)
        vllm_record("watermark_plan_basis", planned.basis)
        response, found = sample(client, api, planned.tokens, watermarking)
        if found is not None:
            vllm_record("watermark_p_value", f"{found.p_value:.3g}")
            vllm_record("watermark_scored_tokens", found.num_scored_tokens)
            vllm_record("watermark_token_source", found.token_source)
        return response, found

    return sampled


@pytest.fixture
def not_exposed(sample, vllm_not_exposed):
    """``not_exposed(api, response)``: the ingress answered its own 404/405 while the server behind it serves ``api``.

    Then no caller can reach the API through the ingress, so it can leak no
    opt-out; the test records that and passes (one home for the judgement:
    ``vllm_not_exposed``).
    """

    def not_exposed(api, response):
        return vllm_not_exposed(str(api), lambda client: sample(client, api, PILOT_TOKENS)[0], response)

    return not_exposed


def failed_request(api: GenerationApi, what: str, response: Response) -> NoReturn:
    """Fails the test: a request the contract needs answered was not."""
    pytest.fail(f"{api}: {what} failed: {response.describe()} {response.text[:200]!r}", pytrace=False)
