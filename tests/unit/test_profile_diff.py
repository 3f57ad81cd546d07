"""The diff between a captured baseline and a target: one difference per change, judged."""

import json
from importlib import resources

from pytest_vllm_conformance.observed.coverage import coverage
from pytest_vllm_conformance.observed.diff import ASPECTS, differences
from pytest_vllm_conformance.observed.diff_report import default_report_path, render_markdown, write_report
from tests.unit.sample_observation import MODEL, observation


def by_id(found):
    return {difference.id: difference for difference in found}


def test_identical_observations_have_no_difference():
    assert differences(observation(), observation(captured_at="later", url="http://elsewhere:1")) == []


def test_a_shorter_context_matters_for_serving():
    found = by_id(
        differences(
            observation(),
            observation(max_model_len=512, models=[{"id": MODEL, "max_model_len": 512, "root": "/models/tiny-llama"}]),
        )
    )
    assert list(found) == ["max_model_len: 2048 -> 512"]
    assert found["max_model_len: 2048 -> 512"].matters
    assert "refused or get their max_tokens clamped" in found["max_model_len: 2048 -> 512"].message


def test_removed_routes_fail_and_added_routes_inform():
    routes = ["GET /health", "GET /v1/models", "POST /v1/chat/completions", "POST /v1/completions", "POST /tokenize"]
    found = by_id(differences(observation(), observation(routes=routes)))
    assert found["route removed: POST /v1/completions/render"].matters
    assert not found["route added: POST /tokenize"].matters


def test_a_version_change_and_new_metrics_are_informational():
    target = observation(
        vllm_version="0.32.0",
        metrics={
            "names": ["vllm:num_preemptions_total", "vllm:request_num_preemptions", "vllm:admission_rejections_total"],
            "truncated": False,
        },
    )
    found = differences(observation(), target)
    assert [(d.id, d.matters) for d in found] == [
        ("vLLM version: 0.31.0 -> 0.32.0", False),
        ("metric added: vllm:admission_rejections_total", False),
    ]


def test_posture_scale_out_tokenizer_and_models_matter():
    target = observation(
        auth={"v1_models_without_key": 200, "posture": "none"},
        scale_out={"probe": "POST /v1/chat/completions/render", "status": 400, "state": "enabled"},
        tokenizer={"text": "fixed text", "token_count": 4, "sha256": "c" * 64, "chat_sha256": "b" * 64},
        models=[{"id": "other", "max_model_len": 2048, "root": "/models/other"}],
    )
    found = by_id(differences(observation(), target))
    for serving in (
        "auth posture: required -> none",
        "scale-out: disabled -> enabled",
        "tokenizer fingerprint changed",
        f"model removed: {MODEL}",
    ):
        assert found[serving].matters, serving
    assert not found["model added: other"].matters
    assert "chat template fingerprint changed" not in found


def test_differences_that_matter_come_first():
    target = observation(
        vllm_version="0.32.0",
        max_model_len=512,
        models=[{"id": MODEL, "max_model_len": 512, "root": "/models/tiny-llama"}],
    )
    assert [d.matters for d in differences(observation(), target)] == [True, False]


def test_a_scale_out_refusal_with_another_status_is_informational():
    target = observation(scale_out={"probe": "POST /v1/chat/completions/render", "status": 403, "state": "disabled"})
    (difference,) = differences(observation(), target)
    assert difference.id == "scale-out answer to POST /v1/chat/completions/render: 404 -> 403"
    assert not difference.matters


def test_unbounded_validation_errors_matter_only_when_they_appear():
    unbounded = {
        "request": "POST /v1/completions promptx100",
        "status": 400,
        "bytes": 91_000,
        "truncated": False,
        "errors_reported": 301,
        "entries_listed": 301,
        "bounded": False,
    }
    found = by_id(differences(observation(), observation(validation_error=unbounded)))
    assert found["validation errors: bounded -> unbounded"].matters
    assert not found["validation error size: 1328 -> 91000 bytes"].matters
    back = by_id(differences(observation(validation_error=unbounded), observation()))
    assert not back["validation errors bounded: False -> True"].matters


def test_what_one_side_could_not_observe_fails_saying_how_to_see_it():
    blocked = observation(
        routes=None,
        metrics=None,
        tokenizer=None,
        unobserved={"tokenizer": "POST /tokenize answered 403", "metrics": "GET /metrics answered 404"},
    )
    found = by_id(differences(observation(), blocked))
    assert set(found) == {"routes not compared", "metrics not compared", "tokenizer not compared"}
    assert all(d.matters for d in found.values())
    tokenizer = found["tokenizer not compared"]
    assert tokenizer.message == (
        "tokenizer not compared: could not be observed on the target (POST /tokenize answered 403): allow POST "
        "/tokenize for the key the run uses, or list tokenizer under profile_diff.ignore in the profile"
    )
    assert "the target (not in its capture)" in found["routes not compared"].why
    # Unseen on both sides is no better than on one.
    assert by_id(differences(blocked, blocked))["tokenizer not compared"].matters


def test_an_ignored_aspect_is_not_compared_at_all():
    blocked = observation(tokenizer=None, unobserved={"tokenizer": "POST /tokenize answered 403"})
    assert differences(observation(), blocked, ignore=["tokenizer"]) == []
    changed = observation(tokenizer={**observation()["tokenizer"], "sha256": "f" * 64})
    assert differences(observation(), changed, ignore=["tokenizer"]) == []


def test_a_baseline_route_whose_probe_was_refused_is_not_taken_as_removed():
    baseline = observation()
    route = baseline["routes"][0]
    target = observation(routes=baseline["routes"][1:], routes_unknown=[route])
    (difference,) = differences(baseline, target)
    assert difference.id == f"route not compared: {route}" and difference.matters
    assert "its probe was refused before vLLM's router" in difference.why


def test_markdown_lists_each_difference_with_its_verdict(tmp_path):
    target = observation(
        vllm_version="0.32.0",
        max_model_len=512,
        models=[{"id": MODEL, "max_model_len": 512, "root": "/models/tiny-llama"}],
    )
    baseline_path = tmp_path / "canary.yaml"
    path, found = write_report(default_report_path(baseline_path), observation(), str(baseline_path), target)
    assert path == tmp_path / "canary.diff.md"
    text = path.read_text()
    assert "- 2 difference(s), 1 that matter(s) for serving" in text
    assert "| max_model_len: 2048 -> 512 | 2048 | 512 | **fails** |" in text
    assert "| vLLM version: 0.31.0 -> 0.32.0 | 0.31.0 | 0.32.0 | informational |" in text
    assert "No difference." in render_markdown([], "a", "b")


def test_a_changed_request_default_fails_with_both_values():
    baseline = observation()
    target = observation(
        generation_defaults={
            "source": "render",
            "completions_max_tokens": 16,
            "greedy": True,
            "chat_sampling": {"temperature": 0.0, "max_tokens": 200},
        }
    )
    found = by_id(differences(baseline, target))
    assert found["default temperature (greedy): False -> True"].matters
    assert found["default chat temperature: 1.0 -> 0.0"].matters
    changed = found["default chat max_tokens: the rest of the context -> 200"]
    assert changed.matters and "--override-generation-config" in changed.why


def test_a_default_seen_only_through_answers_is_compared_where_both_sides_saw_it():
    target = observation(
        generation_defaults={"source": "answers", "completions_max_tokens": 5, "greedy": False, "chat_sampling": None}
    )
    found = by_id(differences(observation(), target))
    assert set(found) == {"default completions max_tokens: 16 -> 5"}


def _extensions(**kinds):
    return {**observation()["wire_extensions"], **kinds}


def test_a_vanished_extension_field_fails_naming_the_answer_and_the_clients():
    target = observation(
        wire_extensions=_extensions(
            completion=["choices.*.prompt_logprobs", "choices.*.stop_reason", "choices.*.routed_experts"]
        )
    )
    found = by_id(differences(observation(), target))
    assert set(found) == {
        "completion extension field removed: choices.*.token_ids",
        "completion extension field added: choices.*.routed_experts",
    }
    removed = found["completion extension field removed: choices.*.token_ids"]
    assert removed.matters and "from completion answers" in removed.why and "pipelines" in removed.why
    assert not found["completion extension field added: choices.*.routed_experts"].matters


def test_an_answer_kind_one_capture_lacks_is_not_taken_as_unchanged():
    extensions = _extensions()
    del extensions["chat_chunk"]
    target = observation(
        wire_extensions=extensions,
        unobserved={"wire_extensions": "POST /v1/chat/completions capture stream answered 400"},
    )
    (found,) = differences(observation(), target)
    assert found.id == "chat_chunk extension fields not compared" and found.matters
    assert "answered 400" in found.why and "profile_diff.ignore" in found.why


def test_a_capture_without_extension_fields_fails_the_aspect_unless_ignored():
    older = observation(wire_extensions=None)
    (found,) = differences(older, observation())
    assert found.id == "wire_extensions not compared" and found.matters
    assert differences(older, observation(), ignore=["wire_extensions"]) == []


def test_every_aspect_of_the_diff_can_be_ignored_and_named_unobserved_in_the_schema():
    schema = json.loads(
        resources.files("pytest_vllm_conformance.catalogue").joinpath("profile.schema.json").read_text()
    )
    observed = schema["properties"]["observed"]["properties"]
    ignorable = schema["properties"]["profile_diff"]["properties"]["ignore"]["items"]["enum"]
    assert set(ignorable) == set(ASPECTS)
    assert set(observed["unobserved"]["propertyNames"]["enum"]) == set(ASPECTS)


def test_coverage_says_what_was_compared_and_fails_a_baseline_of_another_model():
    same = coverage(observation(), observation(), ignore=["metrics"])
    assert same.problem() is None
    assert same.summary() == (
        f"models in both: {MODEL}; compared: routes, auth, scale_out, validation_error, tokenizer, "
        "rendering, generation_defaults, wire_extensions; ignored: metrics"
    )
    other = observation(models=[{"id": "other-model", "max_model_len": 2048, "root": "/models/other"}])
    problem = coverage(other, observation()).problem()
    assert problem is not None and problem.startswith(
        f"the baseline and the target share no model (baseline ['other-model'], target ['{MODEL}']): "
        "max_model_len was compared for none"
    )
    assert "none" in coverage(observation(models=[]), observation()).summary()
