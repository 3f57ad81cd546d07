"""Structured outputs: a constraint the request carries holds, an invalid one is refused, a removed one is not lost.

vLLM's users find after upgrades that a JSON schema no longer constrains, or
that a guided_* field they still send is accepted and dropped (vLLM removed
them in 0.12; 0.28+ answer 200 and ignore them). Every constraint here is
one a random-weight model never meets by chance, so meeting it proves it
was applied. What each version accepts and refuses is data (facts
``structured_output_forms``, ``invalid_structured_outputs``,
``removed_guided_fields``).
"""

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.catalogue.vllm_answers import error_message
from pytest_vllm_conformance.features.generation.answers import read_answer
from pytest_vllm_conformance.features.generation.structured import (
    constraint_cases,
    generation_request,
    invalid_constraints,
    legacy_fields,
)

LEGACY_MAX_TOKENS = 32
REFUSED = (400, 422)


@contract("structured_outputs.constraint_enforced")
@each("case", constraint_cases)
def test_constraint_enforced(case, vllm_client, vllm_facts):
    response = vllm_client.post(*case.request(vllm_facts.model))
    assert response.status == 200, f"{case} was not served: {response.describe()} {response.text[:300]!r}"
    answer = read_answer(response, streamed=case.streamed)
    violation = case.constraint.violation(answer.text)
    cut = answer.finish_reason == "length"
    assert not (violation and cut and case.constraint.could_continue(answer.text)), (
        f"{case}: the answer was cut by max_tokens before the constraint closed, so it cannot be judged: "
        f"{answer.describe()}"
    )
    assert violation is None, f"{case} was not applied: {violation}{' (and ran to max_tokens)' if cut else ''}"


@contract("structured_outputs.invalid_constraint_refused")
@each("case", invalid_constraints)
def test_invalid_constraint_refused(case, vllm_client, vllm_facts):
    response = vllm_client.post(*generation_request(case.endpoint, vllm_facts.model, case.fields, max_tokens=8))
    what = f"{case} ({response.describe()} {response.text[:300]!r})"
    assert response.status < 500, f"a server error instead of a 400 for {what}"
    assert response.status != 200, f"served with 200 as if unconstrained: {what}"
    message = error_message(response) or ""
    assert response.status == 400 and case.message in message, (
        f"expected 400 with {case.message!r} in the message for {what}"
    )


@contract("structured_outputs.legacy_fields_not_silently_dropped")
@each("legacy", legacy_fields)
def test_legacy_fields_not_silently_dropped(legacy, vllm_client, vllm_facts, vllm_expect):
    fields = {legacy.field: legacy.value}
    response = vllm_client.post(
        *generation_request("completions", vllm_facts.model, fields, max_tokens=LEGACY_MAX_TOKENS)
    )
    if response.status in REFUSED:
        return
    assert response.status == 200, f"{legacy.field}: neither refused nor served: {response.describe()}"
    violation = legacy.constraint.violation(read_answer(response, streamed=False).text)
    removed = vllm_expect.fact("removed_guided_fields")
    assert violation is None, (
        f"{legacy.field} was accepted with 200 and ignored ({removed['answer']}): {violation}. A client still "
        f"sending it gets unconstrained output; it should send {legacy.instead}, or an ingress should refuse "
        f"{legacy.field} with 400. Declare generation.legacy_fields: ignored_ok if no client sends it."
    )
