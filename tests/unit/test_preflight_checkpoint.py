"""The preflight reads a checkpoint: its quantization config and GPTQ g_idx, and what each release will do.

The configs are GPTQModel's own (fixtures/gptq_configs/); what the releases do was measured on real servers
(docs/gptq.md) and is pinned here as the preflight's prediction.
"""

import json
import struct
from pathlib import Path

import pytest
from packaging.version import Version

from suites.checkpoint.quantization import (
    GPTQ_GROUP_ORDER_REFUSAL,
    describe,
    predict,
    read_checkpoint,
)

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "gptq_configs"
V029, V030, V032 = Version("0.29.0"), Version("0.30.0"), Version("0.32.0")


def checkpoint(tmp_path: Path, quantization: dict | None, g_idx: dict[str, list[int]] | None = None) -> Path:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    if quantization is not None:
        config["quantization_config"] = quantization
    (tmp_path / "config.json").write_text(json.dumps(config))
    if g_idx is not None:
        write_int32_safetensors(tmp_path / "model.safetensors", g_idx)
    return tmp_path


def write_int32_safetensors(path: Path, tensors: dict[str, list[int]]) -> None:
    header, data = {}, b""
    for name, values in tensors.items():
        raw = struct.pack(f"<{len(values)}i", *values)
        header[name] = {"dtype": "I32", "shape": [len(values)], "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def gptqmodel_config(ordering: str) -> dict:
    return json.loads((CONFIGS / f"{ordering}.json").read_text())


def in_order(size: int, group: int = 32) -> list[int]:
    return [i // group for i in range(size)]


def test_grouped_act_order_starts_before_0_30_and_is_refused_from_0_30_with_vllms_words(tmp_path):
    quantization = read_checkpoint(checkpoint(tmp_path, gptqmodel_config("group")))
    assert quantization is not None and quantization.grouped_act_order
    assert predict(quantization, V029).outcome == "starts"
    for version in (V030, V032):
        prediction = predict(quantization, version)
        assert prediction.outcome == "refused"
        assert prediction.says.startswith(GPTQ_GROUP_ORDER_REFUSAL)
        assert "requantize with static activation ordering" in prediction.says
    assert describe(quantization, V032).startswith(
        "gptq (config.json quantization_config): will not start on vLLM 0.32.0: GPTQ group activation ordering"
    )


@pytest.mark.parametrize("ordering", ["none", "static"])
def test_no_or_static_ordering_starts_on_every_release(tmp_path, ordering):
    model = checkpoint(tmp_path, gptqmodel_config(ordering), {"model.layers.0.mlp.down_proj.g_idx": in_order(256)})
    quantization = read_checkpoint(model)
    assert quantization is not None and not quantization.grouped_act_order
    assert quantization.g_idx_out_of_order == ()
    assert {predict(quantization, version).outcome for version in (V029, V030, V032)} == {"starts"}


def test_a_g_idx_out_of_order_under_desc_act_false_answers_wrong_on_every_release(tmp_path):
    """A bad conversion: desc_act dropped from the config, the act-order g_idx kept; 0.30 drops g_idx silently,
    and 0.29 never read it without desc_act (measured: tests/integration/test_gptq_quality_on_real_vllm.py)."""
    shuffled = in_order(256)[::-1]
    model = checkpoint(
        tmp_path,
        gptqmodel_config("none"),
        {"model.layers.0.mlp.down_proj.g_idx": shuffled, "model.layers.0.mlp.up_proj.g_idx": in_order(128)},
    )
    quantization = read_checkpoint(model)
    assert quantization is not None
    assert quantization.g_idx_out_of_order == ("model.layers.0.mlp.down_proj.g_idx",)
    before = predict(quantization, V029)
    assert before.outcome == "wrong" and "reads g_idx only under desc_act" in before.says
    prediction = predict(quantization, V032)
    assert prediction.outcome == "wrong"
    assert "drops g_idx without a word" in prediction.says


def test_a_dynamic_rule_that_turns_on_grouped_act_order_is_refused(tmp_path):
    quantization = {**gptqmodel_config("none"), "dynamic": {r"+:.*\.mlp\..*": {"desc_act": True}}}
    read = read_checkpoint(checkpoint(tmp_path, quantization))
    assert read is not None and read.dynamic_desc_act == (r"+:.*\.mlp\..*",)
    assert predict(read, V032).outcome == "refused"
    assert predict(read, V029).outcome == "starts"


def test_desc_act_without_groups_is_normalised_and_starts(tmp_path):
    read = read_checkpoint(checkpoint(tmp_path, {**gptqmodel_config("group"), "group_size": -1}))
    assert read is not None and not read.grouped_act_order
    assert predict(read, V032).outcome == "starts"


def test_asymmetric_gptq_is_refused_by_every_release(tmp_path):
    read = read_checkpoint(checkpoint(tmp_path, {**gptqmodel_config("none"), "sym": False}))
    assert read is not None
    for version in (V029, V032):
        assert predict(read, version).says.startswith("Unsupported quantization config: bits=4, sym=False; ")


@pytest.mark.parametrize("version", ["0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"])
def test_bits_vllm_does_not_serve_are_refused_with_its_words_by_every_release(tmp_path, version):
    """vLLM's GPTQ config class takes (4, sym) and (8, sym) only (fact gptq_supported_types): 0.32 refuses bits 3
    at start-up, which the preflight once called "starts"."""
    read = read_checkpoint(checkpoint(tmp_path, {**gptqmodel_config("none"), "bits": 3}))
    assert read is not None
    prediction = predict(read, Version(version))
    assert prediction.outcome == "refused"
    assert prediction.says.startswith("Unsupported quantization config: bits=3, sym=True; "), prediction.says
    eight = read_checkpoint(checkpoint(tmp_path, {**gptqmodel_config("none"), "bits": 8}))
    assert eight is not None and predict(eight, Version(version)).outcome == "starts"


def _layers(tmp_path: Path) -> None:
    write_int32_safetensors(
        tmp_path / "model.safetensors",
        {f"model.layers.{i}.{m}.qweight": [0] for i in (0, 1) for m in ("self_attn.q_proj", "mlp.down_proj")},
    )


def test_a_dynamic_rule_giving_a_module_bits_or_sym_vllm_does_not_serve_is_refused(tmp_path):
    _layers(tmp_path)
    for rule, says in [
        ({r"+:.*\.1\..*": {"bits": 3}}, r"bits=3, sym=True (dynamic rule +:.*\.1\..*)"),
        ({r".*\.mlp\..*": {"sym": False}}, r"bits=4, sym=False (dynamic rule .*\.mlp\..*)"),
        ({r".*qkv_proj": {"bits": 2}}, "bits=2, sym=True"),  # vLLM's fused name of q_proj
    ]:
        read = read_checkpoint(checkpoint(tmp_path, {**gptqmodel_config("none"), "dynamic": rule}))
        assert read is not None
        prediction = predict(read, V032)
        assert prediction.outcome == "refused" and f"Unsupported quantization config: {says}" in prediction.says


def test_a_dynamic_rule_vllm_never_applies_to_a_module_changes_nothing(tmp_path):
    _layers(tmp_path)
    for rule in [
        {r"+:.*\.7\..*": {"bits": 3}},  # no module 7
        {r"-:.*\.mlp\..*": {}, r"+:.*\.mlp\..*": {"bits": 3}},  # the first rule matching leaves mlp unquantized
        {r"+:.*\.mlp\..*": {"bits": 8}},  # 8 bits is served
    ]:
        read = read_checkpoint(checkpoint(tmp_path, {**gptqmodel_config("none"), "dynamic": rule}))
        assert read is not None and predict(read, V032).outcome == "starts", rule


def test_a_gptq_config_without_a_key_vllm_requires_is_refused_naming_it(tmp_path):
    config = {key: value for key, value in gptqmodel_config("none").items() if key != "sym"}
    read = read_checkpoint(checkpoint(tmp_path, config))
    assert read is not None
    prediction = predict(read, V032)
    assert (prediction.outcome, prediction.says) == (
        "refused",
        "Cannot find any of ['sym'] in the model's quantization config.",
    )


def test_legacy_quantize_config_json_is_read_when_config_json_has_none(tmp_path):
    model = checkpoint(tmp_path, None)
    legacy = {"bits": 4, "group_size": 32, "desc_act": True, "sym": True}
    (model / "quantize_config.json").write_text(json.dumps(legacy))
    read = read_checkpoint(model)
    assert read is not None and read.source == "quantize_config.json" and read.method == "gptq"
    assert predict(read, V030).says.startswith(GPTQ_GROUP_ORDER_REFUSAL)


@pytest.mark.parametrize(("actorder", "outcome"), [("group", "refused"), ("dynamic", "refused"), ("static", "starts")])
def test_compressed_tensors_group_and_dynamic_ordering_are_refused_from_0_30(tmp_path, actorder, outcome):
    config = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "actorder": actorder}}},
    }
    read = read_checkpoint(checkpoint(tmp_path, config))
    assert read is not None
    assert predict(read, V032).outcome == outcome
    assert predict(read, V029).outcome == "starts"


def test_an_unquantized_checkpoint_has_nothing_to_read(tmp_path):
    assert read_checkpoint(checkpoint(tmp_path, None)) is None


def test_the_suite_reads_the_given_checkpoint_else_the_served_one_when_quantized(tmp_path):
    """The one rule the plugin claims the suite by and the suite's fixture reads by (connection/model_dir.py)."""
    from pytest_vllm_conformance.connection.model_dir import checkpoint_dir

    (tmp_path / "plain").mkdir()
    (tmp_path / "gptq").mkdir()
    plain = checkpoint(tmp_path / "plain", None)
    quantized = checkpoint(tmp_path / "gptq", gptqmodel_config("none"))
    assert checkpoint_dir(plain, quantized) == plain
    assert checkpoint_dir(None, quantized) == quantized
    assert checkpoint_dir(None, plain) is None
    assert checkpoint_dir(None, tmp_path / "missing") is None
    assert checkpoint_dir(None, None) is None


def test_the_command_line_says_each_release_and_fails_on_a_target_that_refuses(tmp_path, capsys):
    from suites.checkpoint.quantization import main

    model = checkpoint(tmp_path, gptqmodel_config("group"))
    assert main([str(model)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "starts on vLLM 0.28.0",
        "starts on vLLM 0.29.0",
        *(f"will not start on vLLM 0.3{minor}.0" for minor in range(4)),
    ]
    assert main([str(model), "--target-version", "0.32.0"]) == 1
    assert main([str(model), "--target-version", "0.29.0"]) == 0


def test_the_command_line_says_a_directory_that_is_no_model_in_one_line(tmp_path, capsys):
    from suites.checkpoint.quantization import main

    with pytest.raises(SystemExit) as refused:
        main([str(tmp_path / "missing")])
    assert refused.value.code == 2
    assert "missing: no config.json: give a model directory" in capsys.readouterr().err
    model = checkpoint(tmp_path, gptqmodel_config("none"))
    (model / "model.safetensors").write_bytes(b"\xff" * 8 + b"not json")
    assert main([str(model)]) == 2
    assert "model.safetensors: not a readable safetensors file" in capsys.readouterr().out


def test_the_refusal_quoted_is_the_catalogues_fact():
    from pytest_vllm_conformance.catalogue import contracts

    fact = contracts.load().fact("gptq_grouped_act_order", V032)
    assert fact == {"behaviour": "refused", "message": GPTQ_GROUP_ORDER_REFUSAL}
    assert contracts.load().fact("gptq_grouped_act_order", V029) == {"behaviour": "honoured"}
