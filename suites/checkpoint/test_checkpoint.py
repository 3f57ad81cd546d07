"""A quantized checkpoint will start on the target vLLM release and be read as its quantizer wrote it.

Needs no server: ``pytest suites -m checkpoint --vllm-checkpoint=models/llama-gptq --vllm-target-version=0.32.0``;
with a server the version is the server's, and with ``--vllm-serve=MODEL_DIR`` that directory is the
checkpoint. The quantization config and the GPTQ ``g_idx`` tensors are read, and what the release does with
them comes from vLLM's source at its tag (the fact gptq_grouped_act_order; docs/gptq.md has the releases
serving real GPTQModel checkpoints): 0.30 and later refuse grouped activation ordering at start-up, and read a
``g_idx`` out of group order under ``desc_act: false`` as if it were in order, without a word.
"""

import pytest

from pytest_vllm_conformance import contract, undecided
from pytest_vllm_conformance.connection.model_dir import checkpoint_dir

from .quantization import CheckpointError, Reading, read_checkpoint


@pytest.fixture(scope="module")
def checkpoint(vllm_settings, vllm_target_version):
    """The checkpoint (--vllm-checkpoint, else the served directory when it is quantized) read for
    --vllm-target-version (else the server's version); needs no server."""
    if vllm_target_version is None:
        pytest.skip("no target version to judge the checkpoint for: give --vllm-target-version=X (or a server)")
    path = checkpoint_dir(vllm_settings.checkpoint, vllm_settings.serve)
    if path is None:
        pytest.skip("no checkpoint: give --vllm-checkpoint=DIR")
    try:
        return Reading(path, read_checkpoint(path), vllm_target_version)
    except CheckpointError as exc:
        pytest.fail(f"{path}: {exc}", pytrace=False)


@contract("checkpoint.starts_on_target")
def test_starts_on_target(checkpoint, vllm_evidence):
    if why := checkpoint.why_start_unknown():
        undecided(why)
    if checkpoint.prediction.outcome == "refused":
        pytest.fail(checkpoint.describe(), pytrace=False)
    vllm_evidence.judged(1, "quantization configs")


@contract("checkpoint.weights_read_as_written")
def test_weights_read_as_written(checkpoint, vllm_evidence):
    if why := checkpoint.why_weights_unknown():
        undecided(why)
    if checkpoint.prediction.outcome == "wrong":
        pytest.fail(checkpoint.describe(), pytrace=False)
    vllm_evidence.judged(checkpoint.quantization.g_idx_read, "g_idx tensors")
