"""Sampled output carries the declared watermark, and no caller can opt out past the ingress.

vLLM 0.30+ started with --watermark-config watermarks every sampled answer,
but any caller may send "watermarking": false (completions, chat, responses;
more APIs from 0.32: facts ``watermark_opt_out_apis``). A deployment that
must watermark has to remove that field at its ingress, and only a detector
holding the key can tell whether it did. So each API that takes the field is
asked for one sampled answer three ways:

* through the ingress, as is: must be watermarked;
* through the ingress with the opt-out: must STILL be watermarked;
* straight to the server with the opt-out (the control): must NOT be, or the
  check above would pass whether or not the ingress strips anything.

Answers are long enough for a watermarked one to reach TARGET_P_VALUE with
margin, planned from a pilot answer's per-token scores. The key is never
printed (the run's redactor scrubs it from every report).

An API the ingress does not expose (its own 404 or 405, while the server
behind it serves the API) cannot leak the opt-out: it is reported as "not
exposed by the ingress" (a property and a report line), not failed.

Greedy requests (temperature 0) are never watermarked, by vLLM's design: a
deployment that must watermark every answer has to refuse them or force
sampling at its ingress. Nothing here can check that for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.connection.client import TransportFailure
from pytest_vllm_conformance.features import watermark
from pytest_vllm_conformance.features.server_tokenizer import TokenizeUnavailable, token_ids
from pytest_vllm_conformance.features.watermark import keys
from pytest_vllm_conformance.features.watermark.apis import watermark_opt_out_apis
from pytest_vllm_conformance.features.watermark.planning import Plan, answer_length

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


def _failed_request(api, what, response):
    pytest.fail(f"{api}: {what} failed: {response.describe()} {response.text[:200]!r}", pytrace=False)


@contract("watermark.sampled_output_watermarked")
@each("api", watermark_opt_out_apis)
def test_sampled_output_watermarked(api, sampled, plan, vllm_ingress_client, not_exposed):
    response, found = sampled(vllm_ingress_client, api)
    if found is None and not_exposed(api, response):
        return
    if found is None:
        _failed_request(api, "a sampled request through the ingress", response)
    if not found.watermarked:
        planned = plan(api)
        pytest.fail(
            f"{api}: a sampled answer through the ingress is not watermarked under the declared key: {found}, "
            f"needs p <= {TARGET_P_VALUE:g}; planned {planned.tokens} tokens ({planned.basis})",
            pytrace=False,
        )


@contract("watermark.opt_out_stripped_at_ingress")
@each("api", watermark_opt_out_apis)
def test_opt_out_stripped_at_ingress(api, sampled, vllm_ingress_client, vllm_direct_client, not_exposed):
    response, found = sampled(vllm_ingress_client, api, watermarking=False)
    if found is None and not_exposed(api, response):
        return
    if found is None and response.status in REFUSALS:
        baseline, _ = sampled(vllm_ingress_client, api)
        if baseline.status == 200:
            return  # refused outright: no unwatermarked answer either
    if found is None:
        _failed_request(api, "the opt-out request through the ingress", response)
    alone = (
        " (no --vllm-ingress-url given: the server was tested as its own public entry)"
        if vllm_ingress_client is vllm_direct_client
        else ""
    )
    if not found.watermarked:
        pytest.fail(
            f'{api} let the opt-out through the ingress: the answer to "watermarking": false is not watermarked '
            f'({found}); the ingress must remove "{".".join(api.field)}" from POST {api.path} bodies{alone}',
            pytrace=False,
        )


@contract("watermark.opt_out_control")
@each("api", watermark_opt_out_apis)
def test_opt_out_control(api, sampled, vllm_direct_client):
    try:
        response, found = sampled(vllm_direct_client, api, watermarking=False)
    except TransportFailure as exc:
        pytest.skip(f"cannot run the control: the server is not reachable: {exc}")
    if found is None:
        _failed_request(api, "the opt-out request to the server", response)
    if found.watermarked:
        pytest.fail(
            f'the server watermarks {api} answers even with "watermarking": false ({found}): the opt-out check '
            f"of {api} has no power, it passes whether or not the ingress strips the field",
            pytrace=False,
        )
