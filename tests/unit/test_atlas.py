"""The upgrade atlas (docs/atlas/): its pages come from atlas.json, and its measurements agree with the catalogue."""

from __future__ import annotations

import pytest

from atlas import data
from atlas.catalogue_check import contradictions
from atlas.plan import FLAG_SETS, flag_set, profile_of
from atlas.render import capture_diff, pages, upgrade_pairs
from atlas.runner import one_line, outcome_of
from fixtures.verdicts import ContractRun

COMMAND = "python -m atlas render"


def test_committed_atlas_pages_match_atlas_json():
    """A stale page fails here, as docs/contracts.md does: every page is rendered from the data file alone."""
    pytest.importorskip("matplotlib")
    stale = [
        name
        for name, text in pages(data.load()).items()
        if not (data.ATLAS_DIR / name).is_file() or (data.ATLAS_DIR / name).read_text() != text
    ]
    assert not stale, f"docs/atlas pages stale: {stale}; regenerate them with `{COMMAND}`"


def test_committed_measurements_agree_with_the_catalogue():
    assert contradictions(data.load()["records"]) == []


def _record(release: str, flags: str, outcomes: dict[str, str], version: str | None = None) -> dict:
    return {
        "release": release,
        "flag_set": flags,
        "status": "measured",
        "vllm_version": version or f"{release}.0",
        "contracts": {c: {"outcome": o, "reason": "why", "cases": {}} for c, o in outcomes.items()},
    }


def test_a_measurement_the_facts_predict_otherwise_is_named_with_its_fact():
    # scale_out_default says 0.29 serves the routes: a closed gate measured there contradicts it.
    records = {"0.29/plain": _record("0.29", "plain", {"scale_out.disabled_routes_refused": "passed"})}
    (line,) = contradictions(records)
    assert "fact scale_out_default predicts scale_out.disabled_routes_refused failed on vLLM 0.29.0" in line


def test_a_contract_measured_outside_its_versions_is_a_contradiction():
    records = {"0.28/plain": _record("0.28", "plain", {"discovery.version_parses": "not available"})}
    (line,) = contradictions(records)
    assert "discovery.version_parses applies to vLLM >=0.28, but measured not available" in line


def _run(verdict: str, message: str = "", case: str | None = None, **properties: str) -> ContractRun:
    return ContractRun("wire.chat_shape", case, verdict, message, properties)


def test_a_contract_outcome_is_its_most_telling_case():
    failed = outcome_of(
        [
            _run("passed"),
            _run("failed", "Traceback\n  x\nE   AssertionError: the body has no id\nE   assert 1", case="a"),
        ]
    )
    assert failed == {"outcome": "failed", "reason": "a: the body has no id", "cases": {"passed": 1, "failed": 1}}
    assert outcome_of([_run("skipped", "not checked: no key")])["outcome"] == "undecided"
    assert outcome_of([_run("undecided", "undecided: no objective")])["outcome"] == "undecided"
    assert outcome_of([_run("passed"), _run("skipped")])["outcome"] == "passed"
    off = outcome_of([_run("not claimed", vllm_claim_reason="endpoint.auth is none")])
    assert (off["outcome"], off["reason"]) == ("not claimed", "endpoint.auth is none")
    missing = outcome_of([_run("not claimed", vllm_claim_reason="x applies to vLLM >=0.30; the server is 0.29.0")])
    assert missing["outcome"] == "not available"


def test_one_line_skips_the_traceback_and_cuts_long_lines():
    assert one_line("Traceback (most recent call last):\n  File x\nE   the status was 500") == "the status was 500"
    assert len(one_line("x" * 500)) == 220
    generated = "E   the answer " + repr("w" * 50) + " is cut"
    assert one_line(generated) == "the answer '…' is cut"
    prose = "E   the loop's forced custom tool: expected one item, got the items ['message'] (this release's facts)"
    assert one_line(prose) == prose[4:]


def test_capture_differences_name_what_was_added_removed_and_changed():
    before = {"observed": {"routes": ["GET /a", "GET /b"], "scale_out": "enabled", "models": {"m": 512}}}
    after = {"observed": {"routes": ["GET /a", "GET /c"], "scale_out": "disabled", "models": {"m": 1024}}}
    assert capture_diff(before, after) == [
        "observed.models.m: `512` → `1024`",
        "observed.routes: added `GET /c`",
        "observed.routes: removed `GET /b`",
        "observed.scale_out: `enabled` → `disabled`",
    ]


def test_a_section_one_capture_lacks_is_named_not_dumped_and_long_values_are_cut():
    rendering = {"conversations": {f"case {n}": {"ids": list(range(100))} for n in range(12)}}
    assert capture_diff({"observed": {}}, {"observed": {"rendering": rendering}}) == [
        "observed.rendering: absent → captured (1 entry)"
    ]
    changed = capture_diff({"defaults": {"a": list(range(200))}}, {"defaults": {"a": list(range(201))}})
    assert changed == ["defaults.a: added `200`"]
    (line,) = capture_diff({"x": {"big": "a" * 10}}, {"x": {"big": {"k": "b" * 1000}}})
    assert line.endswith("… (cut; atlas.json has it whole)") and len(line) < 400


def test_upgrades_are_consecutive_pairs_and_each_release_to_the_newest():
    records = {data.key(r, "plain"): _record(r, "plain", {}) for r in ("0.28", "0.29", "0.30", "0.32")}
    assert upgrade_pairs({"records": records}) == [
        ("0.28", "0.29"),
        ("0.29", "0.30"),
        ("0.30", "0.32"),
        ("0.28", "0.32"),
        ("0.29", "0.32"),
    ]


def test_every_flag_set_makes_the_same_production_promises_to_every_release():
    assert profile_of(flag_set("plain"))["endpoint"]["auth"] == "none"
    assert profile_of(flag_set("api_key"))["endpoint"]["auth"] == "required"
    assert "max_model_len" not in profile_of(flag_set("yarn")).get("context", {})
    assert len({f.name for f in FLAG_SETS}) == len(FLAG_SETS)


# What tests/integration/test_version_matrix.py pins on a real 0.29 server (make test-matrix), for the
# flag sets and promises the atlas shares with it: the atlas must show the same.
PINNED_0_29 = {
    "plain": {
        "discovery.version_parses": ("passed", None),
        "discovery.max_model_len_published": ("passed", None),
        "discovery.core_routes_served": ("passed", None),
        "scale_out.disabled_routes_refused": (
            "failed",
            "vLLM before 0.30 has no scale-out gate: the routes are always served",
        ),
        "validation_bounds.error_body_bounded": ("failed", None),
        "validation_bounds.error_entries_bounded": ("failed", None),
        "wire.models_shape": ("passed", None),
        "wire.completion_shape": ("passed", None),
        "wire.chat_shape": ("passed", None),
        "wire.embeddings_shape": ("not claimed", None),
        "wire.error_shape": ("passed", None),
        "wire.stream_errors_before_streaming": ("passed", None),
        "wire.error_status_map": ("passed", None),
        "wire.completion_stream_shape": ("passed", None),
        "wire.chat_stream_shape": ("passed", None),
        "wire.completion_stream_framing": ("passed", None),
        "wire.chat_stream_framing": ("passed", None),
        "wire.stream_continuous_usage": ("passed", None),
        "wire.responses_shape": ("passed", None),
        "wire.responses_stream_shape": ("passed", None),
        "wire.responses_stream_framing": ("passed", None),
    },
    "generation": {
        "structured_outputs.constraint_enforced": ("passed", None),
        "structured_outputs.invalid_constraint_refused": ("passed", None),
        "structured_outputs.legacy_fields_not_silently_dropped": ("failed", None),
        "tool_calls.named_function_called": ("passed", None),
        "tool_calls.required_function_called": ("passed", None),
        "tool_calls.none_calls_nothing": ("passed", None),
        "tool_calls.stream_reassembles_to_the_same_calls": ("passed", None),
        "tool_calls.cut_call_ends_length": ("passed", None),
        "tool_calls.forced_choice_refused_without_parser": ("not claimed", None),
    },
}


@pytest.mark.parametrize("flags", sorted(PINNED_0_29))
def test_the_atlas_shows_for_0_29_what_the_version_matrix_pins(flags):
    record = data.load()["records"].get(data.key("0.29", flags))
    if record is None or record.get("status") != "measured":
        pytest.skip(f"0.29/{flags} is not measured in the committed atlas")
    shown = record["contracts"]
    for contract, (outcome, reason) in PINNED_0_29[flags].items():
        assert shown[contract]["outcome"] == outcome, (contract, shown[contract])
        if reason is not None:
            assert reason in shown[contract]["reason"], (contract, shown[contract])


def test_the_server_itself_is_held_to_its_facts():
    """0.29 has no --enable-scale-out (no gate); the YaRN length is the original length times the factor there."""
    yarn_config = {
        "max_position_embeddings": 512,
        "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 512, "rope_type": "yarn"},
    }
    records = {
        "0.29/scale_out": {"release": "0.29", "flag_set": "scale_out", "status": "measured", "contracts": {}},
        "0.29/yarn": {
            **_record("0.29", "yarn", {}),
            "model_config": yarn_config,
            "capture": {"observed": {"max_model_len": 512}},
        },
        "0.30/yarn": {
            **_record("0.30", "yarn", {}),
            "model_config": yarn_config,
            "capture": {"observed": {"max_model_len": 512}},
        },
    }
    assert contradictions(records) == [
        "0.29/scale_out: fact scale_out_gate (none) predicts --enable-scale-out is unknown, but the server measured",
        "0.29/yarn: fact yarn_max_model_len predicts max_model_len 2048, measured 512",
    ]


def test_a_capture_keeps_no_path_of_the_machine_it_ran_on():
    from atlas.runner import without_paths

    assert without_paths({"models": [{"id": "m", "root": "/some/cache/tiny-llama"}], "probe": "POST /v1/x"}) == {
        "models": [{"id": "m", "root": "tiny-llama"}],
        "probe": "POST /v1/x",
    }


def test_a_capture_keeps_the_rendering_ids_and_drops_their_texts():
    from atlas.runner import without_token_texts

    rendering = {"corpus": 1, "conversations": {"greeting": {"ids": [1, 2], "tokens": ["<s>", "Hi"], "status": 200}}}
    assert without_token_texts(rendering) == {
        "corpus": 1,
        "conversations": {"greeting": {"ids": [1, 2], "status": 200}},
    }
    assert without_token_texts(without_token_texts(rendering)) == without_token_texts(rendering)


def test_the_pages_say_whether_the_tree_was_dirty_and_the_timing_bound_the_checks_held():
    from atlas.render import _commit, _validation_bound

    assert _commit({"plugin_commit": "abc1234", "plugin_tree_dirty": True}) == "abc1234 (dirty tree)"
    assert _commit({"plugin_commit": "abc1234", "plugin_tree_dirty": False}) == "abc1234 (clean tree)"
    assert _commit({"plugin_commit": "9d02687"}) == "9d02687 (tree state not recorded)"
    # The atlas profile declares no bound: the plugin's policy (the catalogue's declarations.yaml) is what was held.
    assert _validation_bound() == "10 s, the plugin's policy for endpoint.validation_error_max_seconds"


def test_issue_54_s_flag_sets_declare_what_their_flags_set():
    assert profile_of(flag_set("shutdown_timeout"))["lifecycle"] == {"drain_seconds": 10}  # a number, as YAML reads
    assert flag_set("shutdown_timeout").managed and "--shutdown-timeout" in flag_set("shutdown_timeout").args
    root_path = flag_set("root_path")
    assert root_path.url_path == "/v" and root_path.args[-2:] == ("--root-path", "/v") and root_path.api_key


def test_the_drain_and_the_root_path_are_predicted_by_their_facts():
    """0.32's --shutdown-timeout drains the streams but answers 500 and /health 200 meanwhile; its key check strips
    --root-path as a string. A measurement saying otherwise names the fact."""
    records = {
        "0.32/shutdown_timeout": _record(
            "0.32",
            "shutdown_timeout",
            {
                "lifecycle.in_flight_drained": "passed",
                "lifecycle.exits_within_drain": "passed",
                "lifecycle.new_requests_refused": "passed",
                "lifecycle.health_not_ok_while_draining": "failed",
            },
        ),
        "0.32/root_path": _record("0.32", "root_path", {"auth.root_path_prefix_required": "failed"}),
    }
    (line,) = contradictions(records)
    assert "fact shutdown_modes predicts lifecycle.new_requests_refused failed on vLLM 0.32.0" in line


def test_a_managed_flag_set_is_started_by_the_plugin_and_a_start_that_ran_nothing_is_a_refusal(tmp_path, monkeypatch):
    from pathlib import Path

    from atlas import runner

    given = []

    def no_checks(flags, key, work, target):
        given.extend(target)
        return {"status": "measured", "contracts": {}}

    monkeypatch.setattr(runner, "_pytest", no_checks)
    (tmp_path / "vllm-serve.log").write_text("INFO started\nValueError: unknown flag\n")
    record = runner._run_managed(flag_set("shutdown_timeout"), None, "/venv/bin/python", Path("/m/tiny"), tmp_path)
    assert record == {"status": "server refused the flags", "reason": "ValueError: unknown flag"}
    assert given[:2] == ["--vllm-serve=/m/tiny", "--vllm-serve-python=/venv/bin/python"]
    assert "--vllm-serve-arg=--shutdown-timeout" in given and "--vllm-serve-arg=10" in given


def test_the_pooling_flag_sets_serve_berts_and_declare_what_the_pooling_proofs_declare():
    embedding = flag_set("embedding")
    assert embedding.model == "tiny-bert" and embedding.args[-2:] == ("--runner", "pooling") and not embedding.suites
    assert profile_of(embedding)["wire"] == {"embedding_model": "tiny-bert"}
    assert profile_of(embedding)["pooling"] == {"matryoshka": False}
    assert "wire" not in profile_of(flag_set("cross_encoder")) and "pooling" not in profile_of(flag_set("classifier"))


def test_the_lora_flag_set_serves_the_built_adapter_with_runtime_updating():
    """The adapter's path is this machine's, so it is added where the server starts, not kept in the flag set."""
    from pathlib import Path

    from atlas.runner import server_args

    lora = flag_set("lora")
    assert lora.model == "tiny-llama" and ("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "1") in lora.env
    assert profile_of(lora) == profile_of(flag_set("plain"))  # claimed from the adapter's card, declared nothing
    args = server_args(lora, {"tiny-llama-lora": Path("/cache/tiny-llama-lora")})
    assert args[-2:] == ("--lora-modules", "tiny-llama-lora=/cache/tiny-llama-lora")
    assert server_args(flag_set("plain"), {}) == flag_set("plain").args


def test_the_lora_answers_are_predicted_by_their_facts():
    """0.28-0.32's CPU kernels index the LoRA slots with -1 (fact lora_cpu_no_adapter_tokens): a base request kept
    its answer beside the adapter's there contradicts the fact."""
    records = {
        "0.31/lora": _record(
            "0.31",
            "lora",
            {"lora.answers_kept_beside_each_other": "passed", "lora.unknown_adapter_not_found": "passed"},
        )
    }
    found = contradictions(records)
    assert len(found) == 1
    assert "fact lora_cpu_no_adapter_tokens predicts lora.answers_kept_beside_each_other known departure" in found[0]


def test_the_pooling_answers_are_predicted_by_their_facts():
    """A classifier of three labels registers no scoring route (fact scoring_routes): a rerank measured there, or a
    cross-encoder whose rerank failed, names the fact."""
    records = {
        "0.30/classifier": _record("0.30", "classifier", {"pooling.rerank_ranked": "passed"}),
        "0.30/cross_encoder": _record(
            "0.30",
            "cross_encoder",
            {"pooling.rerank_ranked": "failed", "pooling.removed_fields_refused": "passed"},
        ),
    }
    found = contradictions(records)
    assert len(found) == 2
    assert "0.30/classifier: fact scoring_routes predicts pooling.rerank_ranked not claimed" in found[0]
    assert "0.30/cross_encoder: fact scoring_routes predicts pooling.rerank_ranked passed" in found[1]


def test_a_server_of_another_kind_not_claiming_a_contract_leaves_its_cell_unmeasured():
    """A pooling server claims no generation contract and a generation server no pooling one: that is the server's
    kind, not the release's, so a contract measured only there is shown not measured, not "not claimed"."""
    from atlas.cells import cell

    records = {
        "0.29/embedding": _record(
            "0.29",
            "embedding",
            {"validation_bounds.header_flood_refused": "not claimed", "pooling.rerank_ranked": "passed"},
        ),
        "0.29/classifier": _record("0.29", "classifier", {"pooling.rerank_ranked": "not claimed"}),
        "0.29/plain": _record("0.29", "plain", {"pooling.rerank_ranked": "not claimed"}),
    }
    assert cell({"records": records}, "0.29", "validation_bounds.header_flood_refused") == ("not measured", "")
    assert cell({"records": records}, "0.29", "pooling.rerank_ranked") == ("passed", "embedding")
    del records["0.29/embedding"]
    assert cell({"records": records}, "0.29", "pooling.rerank_ranked") == ("not claimed", "classifier: why")
