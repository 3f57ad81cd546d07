"""The watermark suite's machinery: one sampled answer per API, client and opt-out, scored and cached.

``Sampler`` asks for an answer and scores it with the detector for the
declared watermark (token ids the API returns, else the answer's text
tokenized by the server); every answer is asked for once per module.
``Planner`` sizes answers from a pilot answer through the ingress so that a
watermarked one reaches TARGET_P_VALUE with margin; ``sampled_at_plan``
asks at the planned length and records what it measured. The fixtures that
build them are test_watermark.py's, beside this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance import watermark
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids
from pytest_vllm_conformance.watermark import keys

from .opt_out_apis import GenerationApi
from .planning import Plan, answer_length

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


class Unscorable(Exception):
    """The detector has nothing to score (the server tokenizes nothing, an answer holds no tokens): the check
    fails, saying why."""


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


def declared_detector(expect: Expectations, key_text: str) -> Any:
    """The detector for the declared watermark under the run's key (raises keys.InvalidKey, never echoing it)."""
    algorithm = expect.declared("watermark", "algorithm").value
    options = {
        "context_width": expect.declared("watermark", "context_width").value,
        "p_value_threshold": TARGET_P_VALUE,
    }
    if algorithm == "dual_key_gumbel":
        options["alpha"] = expect.declared("watermark", "alpha").value
    return watermark.make_detector(algorithm, keys.parse_key(key_text), **options)


def form_field_skip(api: GenerationApi) -> str:
    """Why an API whose opt-out is a form field cannot be checked here."""
    return (
        f"cannot check {api}: its opt-out is a form field of an audio request, which this suite "
        "does not send; make sure the ingress removes it too"
    )


class Sampler:
    """``sampler(client, api, max_tokens, watermarking=None) -> (response, Sample | None)``: one sampled answer,
    scored; each is asked for once (raises Unscorable)."""

    def __init__(self, detector: Any, tokenizer: Any, model: str) -> None:
        self.detector = detector
        self.tokenizer = tokenizer  # the client /tokenize is asked on: the server's own
        self.model = model
        self.answers: dict[tuple[Any, ...], tuple[Response, Sample | None]] = {}

    def tokenize(self, text: str, special: bool) -> list[int]:
        try:
            return token_ids(self.tokenizer, self.model, prompt=text, add_special_tokens=special)
        except TokenizeUnavailable as exc:
            raise Unscorable(f"cannot score answers: {exc}") from None

    def __call__(
        self, client: Any, api: GenerationApi, max_tokens: int, watermarking: bool | None = None
    ) -> tuple[Response, Sample | None]:
        key = (client.base_url, api.id, max_tokens, watermarking)
        if key not in self.answers:
            prompt_ids = self.tokenize(PROMPT, True) if api.shape == "generate" else None
            body = api.body(self.model, PROMPT, max_tokens, watermarking=watermarking, prompt_token_ids=prompt_ids)
            response = client.post(api.path, body)
            self.answers[key] = (response, self.score(api, response))
        return self.answers[key]

    def score(self, api: GenerationApi, response: Response) -> Sample | None:
        if response.status != 200:
            return None
        payload = response.json()
        ids, source = api.generated_token_ids(payload), "token ids returned by the API"
        if ids is None:
            text = api.generated_text(payload)
            if text is None:
                raise Unscorable(f"{api}: no generated token ids or text in the answer: {response.describe()}")
            ids, source = self.tokenize(text, False), "answer text re-tokenized"
        found = self.detector.detect(ids)
        return Sample(ids, source, found.p_value, found.num_scored_tokens)


SampleFn = Callable[..., tuple[Response, Sample | None]]


class Planner:
    """``planner(api)``: how many tokens an answer on ``api`` needs, from a pilot answer through the ingress."""

    def __init__(self, detector: Any, sample: SampleFn, ingress: Any, max_model_len: int | None) -> None:
        self.detector = detector
        self.sample = sample
        self.ingress = ingress
        self.cap = min(MAX_TOKENS, (max_model_len or 2048) - PROMPT_ALLOWANCE)
        self.plans: dict[str, Plan] = {}

    def __call__(self, api: GenerationApi) -> Plan:
        if api.id not in self.plans:
            response, pilot = self.sample(self.ingress, api, PILOT_TOKENS)
            if pilot is None:
                self.plans[api.id] = Plan(
                    self.cap, f"no usable pilot ({response.describe()}): the most the context allows"
                )
            else:
                self.plans[api.id] = answer_length(
                    self.detector,
                    pilot.token_ids,
                    pilot.num_scored_tokens,
                    target_p_value=TARGET_P_VALUE,
                    cap=self.cap,
                    min_tokens=MIN_TOKENS,
                    safety_sigmas=SAFETY_SIGMAS,
                )
        return self.plans[api.id]


def sampled_at_plan(
    sample: SampleFn,
    plan: Callable[[GenerationApi], Plan],
    record: Callable[[str, Any], None],
    client: Any,
    api: GenerationApi,
    watermarking: bool | None = None,
) -> tuple[Response, Sample | None]:
    """One answer at the planned length, what was planned and measured recorded as properties."""
    planned = plan(api)
    record("watermark_planned_tokens", planned.tokens)
    record("watermark_plan_basis", planned.basis)
    response, found = sample(client, api, planned.tokens, watermarking)
    if found is not None:
        record("watermark_p_value", f"{found.p_value:.3g}")
        record("watermark_scored_tokens", found.num_scored_tokens)
        record("watermark_token_source", found.token_source)
    return response, found
