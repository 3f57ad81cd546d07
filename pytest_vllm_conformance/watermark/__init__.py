"""Independent detector for vLLM's Gumbel watermarks (numpy only), and the watermark key's rules.

Reproduces vLLM 0.30+'s ``GumbelWatermarkDetector`` and
``DualKeyGumbelWatermarkDetector`` (Philox4x32-10 PRF, ``philox4x32-10-v1``)
without importing torch or vLLM, so a conformance suite can check that a
server configured with ``--watermark-config`` really watermarks its output.

Why this lives in the package and not in ``suites/watermark/`` with the
suite that uses it: the detector is a tool of its own, the console script
``vllm-conformance-watermark`` (``__main__``), and a console script names
one module that must import from an editable install and from the wheel
alike, where a suites folder has two names (``suites.watermark`` in a
checkout, ``pytest_vllm_conformance.suites.watermark`` installed). And the
plugin validates and redacts the run's watermark key by the rules of
``keys``, while the package never imports the suites. What only the suite needs (the
APIs it asks, the answers it samples and sizes) is ``suites/watermark/``.

The watermark key is a secret: nothing in this package prints it.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_vllm_conformance.watermark.detector import (
        Detection,
        DualKeyGumbelDetector,
        GumbelDetector,
        make_detector,
    )
    from pytest_vllm_conformance.watermark.gamma import gamma_survival_integer_shape, regularized_gamma_q
    from pytest_vllm_conformance.watermark.prf import PHILOX_VERSION, PhiloxPRF, derive_watermark_key

# Loaded on first use (PEP 562): every run collects the watermark suite and
# imports this package, but only runs with a watermark key need numpy.
_HOMES = {
    "Detection": "detector",
    "DualKeyGumbelDetector": "detector",
    "GumbelDetector": "detector",
    "gamma_survival_integer_shape": "gamma",
    "make_detector": "detector",
    "regularized_gamma_q": "gamma",
    "PHILOX_VERSION": "prf",
    "PhiloxPRF": "prf",
    "derive_watermark_key": "prf",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)


__all__ = [
    "PHILOX_VERSION",
    "Detection",
    "DualKeyGumbelDetector",
    "GumbelDetector",
    "PhiloxPRF",
    "derive_watermark_key",
    "gamma_survival_integer_shape",
    "make_detector",
    "regularized_gamma_q",
]
