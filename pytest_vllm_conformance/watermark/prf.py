"""Philox4x32-10 watermark PRF, bit-compatible with vLLM's ``PhiloxPRF``.

vLLM (0.30+) keys its Gumbel watermark with a pseudo-random function of
``(key, context, candidate token)``; the published name of the construction is
``"philox4x32-10-v1"``. This module re-implements it with numpy so that the
detector works without torch or vLLM.

All 32-bit words are carried in ``uint64`` arrays: the product of two 32-bit
words fits exactly in 64 bits, which gives Philox's ``mulhilo`` as one
multiply, one shift and one mask instead of the 16-bit limb juggling that a
signed-int64 implementation needs.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["PHILOX_VERSION", "PhiloxPRF", "derive_watermark_key", "validate_key"]

PHILOX_VERSION = "philox4x32-10-v1"

_KEY_MAX = 2**64 - 1
_U32 = 0xFFFFFFFF
_MASK = np.uint64(_U32)
_SHIFT32 = np.uint64(32)
_SHIFT8 = np.uint64(8)
_SHIFT2 = np.uint64(2)
_THREE = np.uint64(3)

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = 0x9E3779B9
_W1 = 0xBB67AE85
_ROUNDS = 10
# Domain separation words: "WMCX" for context absorption, "WMTK" for the
# candidate-token stage, so the two stages can never produce the same block.
_CONTEXT_DOMAIN = 0x574D4358
_TOKEN_DOMAIN = 0x574D544B

# The uniform is ((word >> 8) + 1) / (2**24 + 1): 24 bits are all a float32
# mantissa can hold, and the +1 / +1 keeps the value strictly inside (0, 1).
_UNIFORM_DENOMINATOR = float(2**24 + 1)

Words = tuple[Any, Any, Any, Any]


def validate_key(key: object, what: str = "watermark key") -> int:
    """Return ``key`` as an int if it is a valid 64-bit unsigned key.

    Error messages never contain the value: the key is a secret.
    """
    if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
        raise TypeError(f"{what} must be an int")
    key = int(key)
    if not 0 <= key <= _KEY_MAX:
        raise ValueError(f"{what} must fit in 64 bits (0 <= key <= 2**64 - 1)")
    return key


def derive_watermark_key(key: int, domain: bytes) -> int:
    """Derive a sub-key the way vLLM does for dual-key Gumbel.

    ``sha256(domain || key as 8 big-endian bytes)``, first 8 bytes, big endian.
    vLLM uses ``domain=b"key_a"`` and ``b"key_b"``.
    """
    key = validate_key(key)
    if not isinstance(domain, (bytes, bytearray)):
        raise TypeError("domain must be bytes")
    digest = hashlib.sha256(bytes(domain) + key.to_bytes(8, "big")).digest()
    return int.from_bytes(digest[:8], "big")


def _round_keys(k0: Any, k1: Any) -> list[tuple[Any, Any]]:
    """The 10 Philox round keys (the Weyl sequence ``k + r*W`` mod 2**32)."""
    keys = []
    for round_index in range(_ROUNDS):
        keys.append(
            (
                (k0 + np.uint64((round_index * _W0) & _U32)) & _MASK,
                (k1 + np.uint64((round_index * _W1) & _U32)) & _MASK,
            )
        )
    return keys


def _philox4x32_10(counter: Words, k0: Any, k1: Any) -> Words:
    """Philox4x32-10 on uint64 arrays (or scalars) holding 32-bit words."""
    c0, c1, c2, c3 = counter
    for rk0, rk1 in _round_keys(k0, k1):
        product0 = c0 * _M0
        product1 = c2 * _M1
        # hi ^ word ^ key stays below 2**32, so no mask is needed there.
        c0, c1, c2, c3 = (
            (product1 >> _SHIFT32) ^ c1 ^ rk0,
            product1 & _MASK,
            (product0 >> _SHIFT32) ^ c3 ^ rk1,
            product0 & _MASK,
        )
    return c0, c1, c2, c3


def _as_words(values: npt.ArrayLike, name: str) -> np.ndarray:
    """Integer array -> uint64 array of its low 32 bits (so -1 -> 0xFFFFFFFF)."""
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        if array.size == 0:
            array = array.astype(np.int64)
        else:
            raise TypeError(f"{name} must be an integer array, got dtype {array.dtype}")
    if array.dtype.kind == "u":
        return array.astype(np.uint64) & _MASK
    return (array.astype(np.int64) & _U32).astype(np.uint64)


class PhiloxPRF:
    """Keyed PRF ``(context, token) -> uniform float32 in (0, 1)``.

    Same inputs, same outputs (bit for bit) as vLLM's ``PhiloxPRF`` on the
    pure-torch path, which the CUDA kernel is documented to agree with.
    """

    version = PHILOX_VERSION

    __slots__ = ("_k0", "_k1")

    def __init__(self, key: int) -> None:
        key = validate_key(key, "Philox key")
        # Only the two key words are kept; the key itself is never stored in a
        # form that repr() or an error message could print by accident.
        self._k0 = np.uint64(key & _U32)
        self._k1 = np.uint64(key >> 32)

    def __repr__(self) -> str:
        return "PhiloxPRF(key=***)"

    __str__ = __repr__

    def context_state(self, contexts: npt.ArrayLike) -> Words:
        """Absorb contexts of shape ``(..., w)`` into 4 state words of shape ``(...)``."""
        words = _as_words(contexts, "contexts")
        if words.ndim == 0:
            raise ValueError("contexts must have a trailing context-width axis")
        prefix_shape = words.shape[:-1]
        width = words.shape[-1]
        # The width is absorbed into the initial state so that contexts of
        # different widths never collide.
        state: Words = (
            np.full(prefix_shape, _CONTEXT_DOMAIN, dtype=np.uint64),
            np.full(prefix_shape, width, dtype=np.uint64),
            np.zeros(prefix_shape, dtype=np.uint64),
            np.zeros(prefix_shape, dtype=np.uint64),
        )
        for offset in range(0, width, 4):
            block: list[Any] = []
            for index in range(4):
                position = offset + index
                if position < width:
                    block.append(words[..., position])
                else:
                    # A partial last block is padded with distinct constants.
                    block.append(np.uint64(_U32 - index))
            counter = tuple(state[i] ^ block[i] for i in range(4))
            state = _philox4x32_10(counter, self._k0 ^ np.uint64(offset), self._k1)
        return state

    def uniform(self, contexts: npt.ArrayLike, tokens: npt.ArrayLike) -> np.ndarray:
        """Uniforms for every (context, candidate token) pair, as float32.

        ``contexts`` has shape ``(..., w)``; ``tokens`` broadcasts against
        ``contexts.shape[:-1] + (1,)`` exactly as in vLLM. Two common uses:

        * all candidates of a vocabulary for each row: ``contexts (R, w)``,
          ``tokens (V,)`` -> ``(R, V)``;
        * one target per row (detection): ``contexts (N, w)``,
          ``tokens (N, 1)`` -> ``(N, 1)``.
        """
        state = self.context_state(contexts)
        token_words = _as_words(tokens, "tokens")
        prefix_shape = state[0].shape
        output_shape = np.broadcast_shapes(prefix_shape + (1,), token_words.shape)
        s0, s1, s2, s3 = (np.broadcast_to(word[..., None], output_shape) for word in state)
        token_words = np.broadcast_to(token_words, output_shape)
        # One Philox block yields 4 words, so 4 consecutive token ids share a
        # block (counter word 0 = token >> 2) and pick their word by token & 3.
        outputs = _philox4x32_10(
            (token_words >> _SHIFT2, s0, s1, s2),
            s3 ^ self._k0,
            self._k1 ^ np.uint64(_TOKEN_DOMAIN),
        )
        stacked = np.stack([np.broadcast_to(word, output_shape) for word in outputs], axis=-1)
        selected = np.take_along_axis(stacked, (token_words & _THREE).astype(np.intp)[..., None], axis=-1)[..., 0]
        mantissas = (selected >> _SHIFT8).astype(np.float64)
        return ((mantissas + 1.0) / _UNIFORM_DENOMINATOR).astype(np.float32)
