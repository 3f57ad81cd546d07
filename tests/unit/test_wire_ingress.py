"""Through an ingress, a wire failure names whom it is due to, and what the ingress changed is data.

Recorded vLLM 0.32 bodies (tests/data/wire_samples), judged by the 0.32
contract data, against the same bodies as a gateway rewrites them (LiteLLM's
changes, as our gateway run saw them): the attribution must be the ingress's
only when vLLM's own answer to the same request passes, and must not be
when vLLM's answer fails the same way.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from packaging.version import Version

from pytest_vllm_conformance.catalogue import contracts
from pytest_vllm_conformance.protocol.schemas import deviations_from
from suites.wire import through_ingress
from suites.wire.wire_rules import Verdict, WireRules

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "wire_samples"


def rules() -> WireRules:
    catalogue, version = contracts.load(), Version("0.32.0")
    return WireRules(
        deviations=deviations_from(catalogue.fact("wire_deviations", version)),
        extension_fields=catalogue.fact("wire_extension_fields", version),
        strict=False,
        strict_basis="plugin policy",
        version_label="vLLM 0.32.0",
    )


def chat() -> dict:
    return json.loads((SAMPLES / "chat.json").read_text())


def through_a_gateway(body: dict) -> dict:
    """What LiteLLM 1.108 makes of a chat completion: vLLM's extensions moved or dropped, its own added."""
    body = copy.deepcopy(body)
    for extension in ("prompt_token_ids", "kv_transfer_params"):
        body.pop(extension, None)
    for choice in body["choices"]:
        choice["provider_specific_fields"] = {"token_ids": choice.pop("token_ids", None)}
    return body


def judged(body: dict, status: int = 200) -> Verdict:
    return rules().verdict("chat_completion", [("", body)], "POST /v1/chat/completions -> 200", status)


def test_a_failure_only_the_ingress_answer_has_is_the_ingress_s():
    broken = through_a_gateway(chat())
    broken["choices"][0]["finish_reason"] = None  # OpenAI requires one on a finished completion
    through, direct = judged(broken), judged(chat())
    assert through.failures and not direct.failures
    message = through_ingress.attributed(through, direct)
    assert message.startswith("introduced by the ingress: the same request straight to vLLM is conformant; ")
    assert "$.choices[0].finish_reason" in message


def test_a_failure_vllm_s_own_answer_has_too_is_not_put_on_the_ingress():
    broken = chat()
    broken["choices"][0]["finish_reason"] = None
    through, direct = judged(through_a_gateway(broken)), judged(broken)
    message = through_ingress.attributed(through, direct)
    assert message.startswith("not introduced by the ingress: vLLM's own answer to the same request fails too")
    assert "straight to vLLM: POST /v1/chat/completions -> 200" in message
    assert through_ingress.INTRODUCED not in message


def test_fields_the_ingress_drops_and_adds_and_a_changed_status_are_listed():
    through, direct = judged(through_a_gateway(chat())), judged(chat(), status=200)
    assert not through.failures  # an added field is an extension: reported, not failed
    changes = through_ingress.changes(through, direct)
    only_direct = next(line for line in changes if line.startswith("only straight from vLLM: "))
    assert "prompt_token_ids (extension field)" in only_direct
    assert "kv_transfer_params (extension field)" in only_direct
    assert "choices.*.token_ids (extension field)" in only_direct
    assert "only through the ingress: choices.*.provider_specific_fields (extension field)" in changes
    assert through_ingress.changes(judged(chat()), judged(chat())) == []
    through.status = 500
    assert "status 200 straight from vLLM, 500 through the ingress" in through_ingress.changes(through, direct)
