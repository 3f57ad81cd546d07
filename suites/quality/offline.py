"""Keep lm-eval and the Hugging Face libraries under it away from the Hub.

A promotion gate runs where there is often no network, and it must never
fetch a dataset, a metric or a tokenizer it was not given: what it measures
would then depend on what the Hub serves that day. The switches are read at
import time by ``huggingface_hub`` and ``datasets``, so they are set in the
environment before lm-eval is imported, and on the modules themselves when
something in this process imported them earlier (transformers, say).
"""

from __future__ import annotations

import importlib.util
import os
import sys

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}
INSTALL_HINT = "pip install 'pytest-vllm-conformance[quality]'"


class LmEvalMissing(Exception):
    """lm-eval (with its API extra) is not installed."""


def go_offline() -> None:
    os.environ.update(OFFLINE_ENV)
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None:
        setattr(hub, "HF_HUB_OFFLINE", True)  # noqa: B010 - a module attribute read at call time
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None:
        setattr(datasets_config, "HF_HUB_OFFLINE", True)  # noqa: B010
        setattr(datasets_config, "HF_DATASETS_OFFLINE", True)  # noqa: B010
    evaluate_config = sys.modules.get("evaluate.config")
    if evaluate_config is not None:
        setattr(evaluate_config, "HF_EVALUATE_OFFLINE", True)  # noqa: B010


def require_lm_eval() -> None:
    """Offline switches first, then check that lm-eval and its API backends' packages are there."""
    go_offline()
    missing = [
        name for name in ("lm_eval", "aiohttp", "tenacity", "requests") if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise LmEvalMissing(
            f"the quality suite needs lm-eval with its API extra ({', '.join(missing)} missing): {INSTALL_HINT}"
        )
