"""A capture is a valid serving profile, usable as --vllm-profile and --vllm-baseline, and holds no secret."""

import json
from types import SimpleNamespace

import httpx
import pytest
import yaml

from pytest_vllm_conformance.catalogue.serving_profile import ProfileError, load_profile, validate
from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.connection.secrets import Redactor
from pytest_vllm_conformance.observed.capture import (
    captured_profile,
    metric_names,
    public_url,
    validation_error,
    write_profile,
)
from pytest_vllm_conformance.observed.diff import differences
from pytest_vllm_conformance.observed.wire_extensions import observe_extensions
from pytest_vllm_conformance.protocol.prometheus import family_names
from tests.unit.sample_observation import observation

SECRET = "sk-capture-secret-81c2"


def test_a_capture_is_a_valid_profile_declaring_what_was_seen(tmp_path):
    path = write_profile(tmp_path / "captures" / "base.yaml", observation(), Redactor([SECRET]))
    profile = load_profile(path)
    assert profile.get("endpoint", "auth") == "required"
    assert profile.get("endpoint", "scale_out") == "disabled"
    assert profile.get("context", "max_model_len") == 2048
    assert profile.data["observed"] == observation()


def test_unknown_observations_are_not_declared():
    document = captured_profile(
        observation(
            auth={"v1_models_without_key": None, "posture": "unknown"},
            scale_out={"probe": "POST /v1/chat/completions/render", "status": None, "state": "unknown"},
            max_model_len=None,
            routes=None,
            validation_error=None,
            metrics=None,
            tokenizer=None,
        )
    )
    assert "endpoint" not in document and "context" not in document
    validate(document, source="test")


def test_the_schema_refuses_a_malformed_observation():
    document = captured_profile(observation())
    document["observed"]["tokenizer"]["sha256"] = "not a digest"
    with pytest.raises(ProfileError, match=r"observed\.tokenizer\.sha256"):
        validate(document, source="test")


def test_a_secret_that_reached_the_observation_is_masked_in_the_file(tmp_path):
    leaked = observation(models=[{"id": "tiny-llama", "max_model_len": 2048, "root": f"/models/{SECRET}"}])
    path = write_profile(tmp_path / "base.yaml", leaked, Redactor([SECRET]))
    assert SECRET not in path.read_text()
    yaml.safe_load(path.read_text())


def test_the_recorded_url_keeps_no_credentials_or_query():
    assert public_url("http://user:pw@canary:8000/base?token=abc#x") == "http://canary:8000/base"


def test_metric_names_are_families_without_created_timestamps():
    text = "\n".join(
        [
            "# HELP vllm:num_preemptions_total Preemptions.",
            "# TYPE vllm:num_preemptions_total counter",
            'vllm:num_preemptions_total{model_name="m"} 0.0',
            "# TYPE vllm:num_preemptions_created gauge",
            "# TYPE vllm:e2e_request_latency_seconds histogram",
            'vllm:e2e_request_latency_seconds_bucket{le="0.3"} 0.0',
        ]
    )
    assert family_names(text) == ["vllm:e2e_request_latency_seconds", "vllm:num_preemptions_total"]
    assert family_names('up 1\nup{a="b"} 1\nother_total 2\n') == ["other_total", "up"]


def test_a_baseline_without_an_observation_stops_the_run(pytester, tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text("profile: 1\nname: plain\n")
    result = pytester.runpytest("-p", "no:cacheprovider", f"--vllm-baseline={plain}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--vllm-baseline: profile {plain} has no observed section; capture one with*"])


def test_an_invalid_baseline_names_the_option_and_the_field(pytester, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("profile: 1\nname: broken\ncontext:\n  max_tokens_clamp: sometimes\n")
    result = pytester.runpytest("-p", "no:cacheprovider", f"--vllm-baseline={broken}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--vllm-baseline: profile*broken.yaml: 1 problem(s)*"])
    assert "context.max_tokens_clamp: 'sometimes' is not one of ['allowed', 'forbidden']" in result.stderr.str()


class _GenerationServer:
    """Answers the capture's completion requests with vLLM-shaped bodies; chat is refused (no chat template), and
    there is no Responses API."""

    def post(self, path, body):
        if path == "/v1/chat/completions":
            return _response(path, 400, b'{"error": {"message": "no chat template"}}')
        if path == "/v1/responses":
            return _response(path, 404, b'{"detail": "Not Found"}')
        choice = {"index": 0, "text": "Red", "finish_reason": None, "logprobs": None, "stop_reason": None}
        chunk = {"id": "c", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}
        if body.get("stream"):
            return _response(path, 200, f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
        done = {**choice, "finish_reason": "length", "token_ids": None}
        usage = {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}
        return _response(
            path, 200, json.dumps({**chunk, "choices": [done], "usage": usage, "kv_transfer_params": None})
        )


def _response(path, status, body):
    body = body.encode() if isinstance(body, str) else body
    return Response("POST", path, status, httpx.Headers(), body, len(body), False, 0.0)


def test_extension_fields_are_recorded_per_answer_kind_and_a_refused_kind_is_named():
    unobserved = {}
    assert observe_extensions(_GenerationServer(), "m", unobserved) == {
        "completion": ["choices.*.stop_reason", "choices.*.token_ids", "kv_transfer_params"],
        "completion_chunk": ["choices.*.stop_reason"],
    }
    assert unobserved["wire_extensions"] == (
        "/v1/chat/completions capture answered 400; /v1/chat/completions capture stream answered 400; "
        "/v1/responses capture answered 404; /v1/responses capture stream answered 404"
    )


class _AnswersWith:
    """A client whose every answer is one fixed response."""

    def __init__(self, status, body, truncated=False):
        self.status, self.body, self.truncated = status, body, truncated

    def answer_or_none(self, method, path, **kw):
        return Response(method, path, self.status, httpx.Headers(), self.body, len(self.body), self.truncated, 0.0)


def test_a_metrics_page_cut_at_the_cap_is_kept_but_not_compared():
    unobserved = {}
    page = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n# TYPE vllm:cut"
    seen = metric_names(_AnswersWith(200, page, truncated=True), unobserved)
    assert seen == {"names": ["vllm:num_requests_running"], "truncated": True}
    assert unobserved["metrics"].startswith("GET /metrics passed the byte cap (truncated at")
    base = observation()
    cut = observation(metrics=seen, unobserved=unobserved)
    assert [d.id for d in differences(base, cut)] == ["metrics not compared"]


def test_a_malformed_request_answered_without_an_error_message_is_unobserved_not_bounded():
    unobserved = {}
    facts = SimpleNamespace(model="m", serves=lambda method, path: True)
    requests = [{"path": "/v1/completions", "field": "prompt", "item": 1, "base": {}}]
    seen = validation_error(_AnswersWith(502, b"<html>bad gateway</html>"), facts, requests, unobserved)
    assert seen["bounded"] is None
    assert unobserved["validation_error"] == "POST /v1/completions promptx100 answered 502 without an error message"
    assert [d.id for d in differences(observation(), observation(validation_error=seen))] == [
        "validation_error not compared"
    ]


def test_a_stream_of_no_event_records_no_extension_field_as_gone():
    class OnlyDone:
        def post(self, path, body):
            text = b"data: [DONE]\n\n" if body.get("stream") else b'{"choices": []}'
            return Response("POST", path, 200, httpx.Headers(), text, len(text), False, 0.0)

    unobserved = {}
    observed = observe_extensions(OnlyDone(), "m", unobserved)
    assert "completion_chunk" not in observed and "responses_event" not in observed
    assert "/v1/completions capture stream answered 200 with no JSON event" in unobserved["wire_extensions"]
