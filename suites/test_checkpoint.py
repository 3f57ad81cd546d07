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


@contract("checkpoint.starts_on_target")
def test_starts_on_target(vllm_checkpoint, vllm_evidence):
    if why := vllm_checkpoint.why_start_unknown():
        undecided(why)
    if vllm_checkpoint.prediction.outcome == "refused":
        pytest.fail(vllm_checkpoint.describe(), pytrace=False)
    vllm_evidence.judged(1, "quantization configs")


@contract("checkpoint.weights_read_as_written")
def test_weights_read_as_written(vllm_checkpoint, vllm_evidence):
    if why := vllm_checkpoint.why_weights_unknown():
        undecided(why)
    if vllm_checkpoint.prediction.outcome == "wrong":
        pytest.fail(vllm_checkpoint.describe(), pytrace=False)
    vllm_evidence.judged(vllm_checkpoint.quantization.g_idx_read, "g_idx tensors")
