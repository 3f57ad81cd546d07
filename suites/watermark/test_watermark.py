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
margin, planned from a pilot answer's per-token scores (the sampling, scoring
and caching: sampled_answers.py beside this module). The key is never
printed (the run's redactor scrubs it from every report).

An API the ingress does not expose (its own 404 or 405, while the server
behind it serves the API) cannot leak the opt-out: it is reported as "not
exposed by the ingress" (a property and a report line), not failed, when the
profile declares its route hidden (ingress.hidden_routes); else it fails.

Greedy requests (temperature 0) are never watermarked, by vLLM's design: a
deployment that must watermark every answer has to refuse them or force
sampling at its ingress. Nothing here can check that for it.
"""

from __future__ import annotations

import functools
from typing import NoReturn

import pytest

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.connection.client import TransportFailure
from pytest_vllm_conformance.watermark.keys import InvalidKey

from .opt_out_apis import watermark_opt_out_apis
from .sampled_answers import (
    PILOT_TOKENS,
    REFUSALS,
    TARGET_P_VALUE,
    Planner,
    Sampler,
    Unscorable,
    declared_detector,
    form_field_skip,
    sampled_at_plan,
)


@pytest.fixture(scope="module")
def detector(vllm_expect, vllm_watermark_key):
    """The detector for the declared watermark (claimed where watermark.required is true, and the key given)."""
    try:
        return declared_detector(vllm_expect, vllm_watermark_key.reveal())
    except InvalidKey as problem:
        pytest.fail(f"the watermark key {problem}", pytrace=False)  # the value is never echoed


@pytest.fixture(scope="module")
def sample(detector, vllm_client, vllm_facts):
    """Ask ``client`` for one sampled answer on ``api`` and score it; answers are cached per module."""
    sampler = Sampler(detector, vllm_client, vllm_facts.model)

    def sample(client, api, max_tokens, watermarking=None):
        if api.form:
            pytest.skip(form_field_skip(api))
        try:
            return sampler(client, api, max_tokens, watermarking)
        except Unscorable as exc:
            pytest.fail(str(exc), pytrace=False)

    return sample


@pytest.fixture(scope="module")
def plan(detector, sample, vllm_ingress_client, vllm_facts):
    """``plan(api)``: how many tokens an answer on ``api`` needs, from a pilot answer through the ingress."""
    return Planner(detector, sample, vllm_ingress_client, vllm_facts.max_model_len)


@pytest.fixture
def sampled(sample, plan, vllm_record):
    """``sampled(client, api, watermarking=None) -> (response, Sample | None)``, reported as properties."""
    return functools.partial(sampled_at_plan, sample, plan, vllm_record)


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


def failed_request(api, what: str, response) -> NoReturn:
    """Fails the test: a request the contract needs answered was not."""
    pytest.fail(f"{api}: {what} failed: {response.describe()} {response.text[:200]!r}", pytrace=False)


@contract("watermark.sampled_output_watermarked")
@each("api", watermark_opt_out_apis)
def test_sampled_output_watermarked(api, sampled, plan, vllm_ingress_client, not_exposed):
    response, found = sampled(vllm_ingress_client, api)
    if found is None and not_exposed(api, response):
        return
    if found is None:
        failed_request(api, "a sampled request through the ingress", response)
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
        failed_request(api, "the opt-out request through the ingress", response)
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
        failed_request(api, "the opt-out request to the server", response)
    if found.watermarked:
        pytest.fail(
            f'the server watermarks {api} answers even with "watermarking": false ({found}): the opt-out check '
            f"of {api} has no power, it passes whether or not the ingress strips the field",
            pytrace=False,
        )
