"""The checkpoint suite, run without a server on checkpoints written here: each contract fails by id.

The configs are GPTQModel's own (fixtures/gptq_configs/); the g_idx tensors are written as int32 safetensors,
so neither the quantizer nor a server is needed. The real GPTQ checkpoints on real servers are
tests/integration/test_gptq_on_real_vllm.py and docs/gptq.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.verdicts import assert_verdicts, failed_checks
from suites.checkpoint.quantization import GPTQ_GROUP_ORDER_REFUSAL
from tests.conftest import SUITES
from tests.unit.test_preflight_checkpoint import checkpoint, gptqmodel_config, in_order

STARTS, READ_AS_WRITTEN = "checkpoint.starts_on_target", "checkpoint.weights_read_as_written"
G_IDX = "model.layers.0.mlp.down_proj.g_idx"


def run_checkpoint_suite(pytester: pytest.Pytester, model: Path, version: str):
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        str(SUITES),
        "-m",
        "checkpoint",
        f"--vllm-checkpoint={model}",
        f"--vllm-target-version={version}",
        "-p",
        "no:cacheprovider",
        "-rA",
        f"--junitxml={junit}",
        timeout=300,
    )
    return result, junit


@pytest.mark.pins(failed={STARTS}, healthy={READ_AS_WRITTEN})
def test_grouped_act_order_fails_the_start_on_0_32_naming_vllms_words_and_the_fix(pytester, tmp_path):
    model = checkpoint(tmp_path, gptqmodel_config("group"), {G_IDX: in_order(256)[::-1]})
    result, junit = run_checkpoint_suite(pytester, model, "0.32.0")
    said = failed_checks(junit)[STARTS]
    assert GPTQ_GROUP_ORDER_REFUSAL in said and "requantize with static activation ordering" in said, said
    assert_verdicts(junit, {STARTS: "failed", READ_AS_WRITTEN: "undecided"})
    result.stdout.fnmatch_lines(["*UNDECIDED*refuses the checkpoint at start-up, so it reads no weight*"])
    assert result.ret == 1


@pytest.mark.pins(failed={STARTS})
def test_gptq_bits_vllm_does_not_serve_fail_the_start_on_every_release_with_vllms_words(pytester, tmp_path):
    """3 bits passed once ("starts on vLLM 0.32.0"); real 0.32 refuses it at start-up
    (tests/integration/test_gptq_on_real_vllm.py)."""
    model = checkpoint(tmp_path, {**gptqmodel_config("none"), "bits": 3}, {G_IDX: in_order(256)})
    result, junit = run_checkpoint_suite(pytester, model, "0.28.0")
    said = failed_checks(junit)[STARTS]
    assert "will not start on vLLM 0.28.0: Unsupported quantization config: bits=3, sym=True" in said, said
    assert_verdicts(junit, {STARTS: "failed", READ_AS_WRITTEN: "undecided"})
    assert result.ret == 1


@pytest.mark.pins(healthy={STARTS, READ_AS_WRITTEN})
def test_the_same_checkpoint_starts_and_is_read_as_written_on_0_29(pytester, tmp_path):
    model = checkpoint(tmp_path, gptqmodel_config("group"), {G_IDX: in_order(256)[::-1]})
    _, junit = run_checkpoint_suite(pytester, model, "0.29.0")
    assert_verdicts(junit, {STARTS: "passed", READ_AS_WRITTEN: "passed"})


@pytest.mark.parametrize("ordering", ["none", "static"])
@pytest.mark.pins(healthy={STARTS, READ_AS_WRITTEN})
def test_no_or_static_ordering_passes_both_on_0_32(pytester, tmp_path, ordering):
    model = checkpoint(tmp_path, gptqmodel_config(ordering), {G_IDX: in_order(256)})
    result, junit = run_checkpoint_suite(pytester, model, "0.32.0")
    assert_verdicts(junit, {STARTS: "passed", READ_AS_WRITTEN: "passed"})
    assert result.ret == 0


@pytest.mark.pins(failed={READ_AS_WRITTEN}, healthy={STARTS})
def test_a_g_idx_out_of_order_under_desc_act_false_fails_the_reading_on_0_32(pytester, tmp_path):
    """A bad conversion: desc_act dropped from the config, the act-order g_idx kept; 0.32 drops g_idx silently."""
    model = checkpoint(tmp_path, gptqmodel_config("none"), {G_IDX: in_order(256)[::-1]})
    _, junit = run_checkpoint_suite(pytester, model, "0.32.0")
    said = failed_checks(junit)[READ_AS_WRITTEN]
    assert "1 g_idx tensor(s) not in group order (first model.layers.0.mlp.down_proj.g_idx)" in said, said
    assert_verdicts(junit, {STARTS: "passed", READ_AS_WRITTEN: "failed"}, failed={READ_AS_WRITTEN})


def test_an_unquantized_checkpoint_is_undecided_not_passed(pytester, tmp_path):
    model = checkpoint(tmp_path, None)
    result, junit = run_checkpoint_suite(pytester, model, "0.32.0")
    assert_verdicts(junit, {STARTS: "undecided", READ_AS_WRITTEN: "undecided"})
    result.stdout.fnmatch_lines(["*UNDECIDED*no quantization config: nothing in it is known to refuse*"])
    # Nothing reached a verdict, so the run does not pass, and its summary names only the feature it ran.
    result.stdout.fnmatch_lines(["*vLLM conformance: partial*", "  checkpoint *partial *0 of 2 checked*"])
    result.stdout.fnmatch_lines(["nothing was judged: none of the 2 claimed check(s) of this run reached a verdict*"])
    assert "not run" not in result.stdout.str()
    assert result.ret == 1


def test_an_unreadable_checkpoint_is_one_line_never_a_traceback(pytester, tmp_path):
    model = checkpoint(tmp_path, gptqmodel_config("none"))
    (model / "model.safetensors").write_bytes(b"\xff" * 8 + b"not json")
    result, junit = run_checkpoint_suite(pytester, model, "0.32.0")
    result.stdout.fnmatch_lines(["*model.safetensors: not a readable safetensors file*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    assert result.ret == 1


def test_a_checkpoint_that_is_no_model_directory_is_a_usage_error(pytester, tmp_path):
    result, _ = run_checkpoint_suite(pytester, tmp_path / "missing", "0.32.0")
    result.stderr.fnmatch_lines(["ERROR: --vllm-checkpoint: * is not a directory: give a model directory*"])
    assert result.ret == 4
    result, _ = run_checkpoint_suite(pytester, tmp_path, "0.32.0")
    result.stderr.fnmatch_lines(["ERROR: --vllm-checkpoint: * has no config.json*"])


def test_without_a_checkpoint_the_suite_is_not_claimed_saying_what_to_give(pytester):
    result = pytester.runpytest_subprocess(
        str(SUITES), "-m", "checkpoint", "-p", "no:cacheprovider", "-rs", timeout=300
    )
    result.stdout.fnmatch_lines(["nothing was claimed*"])
    result.stdout.fnmatch_lines(["*not claimed: not given: --vllm-checkpoint=DIR*"])
