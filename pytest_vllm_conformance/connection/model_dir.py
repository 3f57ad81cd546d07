"""A model directory before any server reads it: its quantization config, and the checkpoint a run judges.

Two readers need it: the plugin, to know whether the run has a checkpoint
the checkpoint suite is claimed on (``--vllm-checkpoint``, or the directory
it serves with ``--vllm-serve`` when that is quantized), and that suite,
which reads the same directory whole (its GPTQ ``g_idx`` tensors) and
judges it. So it lives on this floor, below both, and the plugin needs no
checkpoint reader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: Path) -> Any:
    """The JSON at ``path``, or None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def quantization_config(model_dir: Path) -> tuple[dict[str, Any], str] | None:
    """The quantization config the directory declares and where (``config.json``'s ``quantization_config``, else
    GPTQ's ``quantize_config.json``), or None: vLLM reads the model as unquantized."""
    config = read_json(model_dir / "config.json")
    raw = config.get("quantization_config") if isinstance(config, dict) else None
    source = "config.json quantization_config"
    if raw is None and (model_dir / "quantize_config.json").is_file():
        raw, source = read_json(model_dir / "quantize_config.json"), "quantize_config.json"
    return (raw, source) if isinstance(raw, dict) else None


def checkpoint_dir(given: Path | None, served: Path | None) -> Path | None:
    """The model directory the checkpoint suite reads: ``given`` (--vllm-checkpoint), else ``served``
    (--vllm-serve) when it declares a quantization (an unquantized served model has nothing to judge)."""
    if given is not None:
        return given
    return served if served is not None and quantization_config(served) is not None else None
