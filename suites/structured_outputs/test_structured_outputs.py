"""Structured outputs: a constraint the request carries holds, an invalid one is refused, a removed one is not lost.

vLLM's users find after upgrades that a JSON schema no longer constrains, or
that a guided_* field they still send is accepted and dropped (vLLM removed
them in 0.12; 0.28+ answer 200 and ignore them). Every constraint here is
one a random-weight model never meets by chance, so meeting it proves it
was applied; an answer cut by max_tokens that is still the start of one that
meets it is undecided (a skip), never a failure. What each version accepts
and refuses is data (facts ``structured_output_forms``,
``invalid_structured_outputs``, by backend, ``json_whitespace_control``,
``removed_guided_fields``).
"""

from pytest_vllm_conformance import contract, each, undecided
from pytest_vllm_conformance.catalogue.release_facts import padding_note
from pytest_vllm_conformance.protocol.answer_reader import read_answer
from pytest_vllm_conformance.protocol.error_envelope import error_message

from .constraints import (
    constraint_cases,
    generation_request,
    invalid_constraints,
    legacy_fields,
)

LEGACY_MAX_TOKENS = 32
REFUSED = (400, 422)


@contract("structured_outputs.constraint_enforced")
@each("case", constraint_cases)
def test_constraint_enforced(case, vllm_client, vllm_facts, vllm_expect):
    response = vllm_client.post(*case.request(vllm_facts.model))
    assert response.status == 200, f"{case} was not served: {response.describe()} {response.text[:300]!r}"
    answer = read_answer(response, streamed=case.streamed)
    judged = case.constraint.judge(answer.text, cut=answer.cut)
    if judged.undecided:
        padding = padding_note(vllm_expect.release.json_whitespace_control, vllm_expect.version_label)
        undecided(f"{case}: {judged.undecided} ({padding})")
    assert judged.problem is None, f"{case} was not applied: {judged.problem}"


@contract("structured_outputs.invalid_constraint_refused")
@each("case", invalid_constraints)
def test_invalid_constraint_refused(case, vllm_client, vllm_facts, vllm_record):
    response = vllm_client.post(*generation_request(case.endpoint, vllm_facts.model, case.fields, max_tokens=8))
    what = f"{case} ({response.describe()} {response.text[:300]!r})"
    assert response.status < 500, f"a server error instead of a 400 for {what}"
    assert response.status != 200, f"served with 200 as if unconstrained: {what}"
    backend = case.worded_by(error_message(response) or "")
    assert response.status == 400 and backend, (
        f"expected 400 with a message naming the problem, in the words of one of the version's "
        f"structured-output backends ({case.wordings()}), for {what}"
    )
    vllm_record("structured_output_refusal_words", backend)


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
    answer = read_answer(response, streamed=False)
    judged = legacy.constraint.judge(answer.text, cut=answer.cut)
    if judged.undecided:
        undecided(f"{legacy.field} was served with 200, and whether it was honoured: {judged.undecided}")
    removed = vllm_expect.release.removed_guided_fields
    assert judged.problem is None, (
        f"{legacy.field} was accepted with 200 and ignored ({removed['answer']}): {judged.problem}. A client still "
        f"sending it gets unconstrained output; it should send {legacy.instead}, or an ingress should refuse "
        f"{legacy.field} with 400. Declare generation.legacy_fields: ignored_ok if no client sends it."
    )
