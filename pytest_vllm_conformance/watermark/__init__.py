"""Independent detector for vLLM's Gumbel watermarks (numpy only).

Reproduces vLLM 0.30+'s ``GumbelWatermarkDetector`` and
``DualKeyGumbelWatermarkDetector`` (Philox4x32-10 PRF, ``philox4x32-10-v1``)
without importing torch or vLLM, so a conformance suite can check that a
server configured with ``--watermark-config`` really watermarks its output.

The watermark key is a secret: nothing in this package prints it.
"""

from .detector import (
    Detection,
    DualKeyGumbelDetector,
    GumbelDetector,
    gamma_survival_integer_shape,
    make_detector,
    regularized_gamma_q,
)
from .prf import PHILOX_VERSION, PhiloxPRF, derive_watermark_key

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
