"""``torch.save`` bytes for vLLM's ``prompt_embeds``, written without torch.

vLLM's ``/v1/completions`` (with ``--enable-prompt-embeds``) accepts
``prompt_embeds``: base64 of what ``torch.save(tensor)`` writes. The server
decodes it with ``torch.load(BytesIO(data), weights_only=True,
map_location="cpu")`` inside ``torch.sparse.check_sparse_tensor_invariants()``,
densifies it (0.30+: only if the *declared* dense size is within
``VLLM_MAX_EMBED_DECODE_BYTES``), squeezes a leading dim, and then requires a
2-D floating-point tensor whose second dim is the model's hidden size.

The plugin runs where torch is not installed, so ``torch_save`` writes the
same bytes torch does, from numpy arrays and the stdlib; this module makes
the payloads the suite sends:

* a zip archive laid out the way torch's C++ writer (miniz) lays it out: every
  entry STORED under ``archive/``, each entry's data 64-byte aligned by a
  ``FB`` padding extra field, a data descriptor after every non-empty entry,
  and zip64 end records. With torch's ``serialization_id`` substituted, the
  output is byte-identical to ``torch.save`` (the unit tests check this).
* ``archive/data.pkl``: a protocol-2 pickle that calls only globals torch's
  ``weights_only`` unpickler allow-lists (``torch._utils._rebuild_tensor_v2``,
  ``torch._utils._rebuild_sparse_tensor``, ``torch.serialization._get_layout``,
  ``torch.Size``, ``torch.FloatStorage``..., ``collections.OrderedDict``),
  with storages referenced by persistent ids ``("storage", <StorageType>,
  key, "cpu", numel)`` and their bytes in ``archive/data/<key>``.

The pickle is emitted opcode by opcode rather than through ``pickle.Pickler``:
the stdlib pickler refuses to write a GLOBAL it cannot import, and torch is
not importable here. The emitter memoizes exactly as CPython's pickler does
when torch pickles a tensor, which is what makes byte equality possible.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import TYPE_CHECKING

# numpy is imported inside the functions that use it: every run collects the
# embedding suite, and only runs that send payloads should pay for numpy.
if TYPE_CHECKING:
    import numpy as np

from .torch_save import save_dense, save_sparse_coo

__all__ = [
    "dense_float32",
    "dense_with_batch",
    "dense_int64",
    "dense_values",
    "sparse_coo_declaring",
    "sparse_coo_parts",
    "save_dense",
    "save_sparse_coo",
    "declared_dense_bytes",
    "to_base64",
]

#: A spread small enough that any embedding layer's activations look plausible.
_VALUE_SCALE = 0.02


# --------------------------------------------------------------------------
# Public builders
# --------------------------------------------------------------------------


def dense_values(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """The float32 (rows, cols) values ``dense_float32`` serializes.

    Deterministic for a seed, so a test can compare what the server (or
    ``torch.load``) returns with what was sent.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(_VALUE_SCALE)


def dense_float32(rows: int, cols: int, seed: int = 0) -> bytes:
    """A contiguous float32 (rows, cols) tensor: the ordinary accepted payload.

    vLLM loads it, checks ``cols`` against the model's hidden size and casts it
    to the model dtype; ``rows`` counts as that many prompt tokens against
    ``max_model_len``.
    """
    return save_dense(dense_values(rows, cols, seed))


def dense_with_batch(rows: int, cols: int, seed: int = 0) -> bytes:
    """A float32 (1, rows, cols) tensor.

    vLLM squeezes the leading dim of any tensor with more than two dims, so
    this must behave exactly like ``dense_float32(rows, cols, seed)``.
    """
    return save_dense(dense_values(rows, cols, seed)[None, :, :])


def dense_int64(rows: int, cols: int, seed: int = 0) -> bytes:
    """An int64 (rows, cols) tensor of small non-negative integers.

    It loads fine, but vLLM refuses it (400, "... is not a floating-point
    type, cannot safely cast to the model's dtype ...") rather than casting an
    integer payload, which almost always means the caller sent the wrong
    tensor (token ids, quantized data).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    return save_dense(rng.integers(0, 1000, size=(rows, cols), dtype=np.int64))


def sparse_coo_parts(shape: tuple[int, int], nnz: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The (indices, values) ``sparse_coo_declaring`` serializes.

    ``indices`` is int64 (2, nnz): distinct, in-bounds coordinates sorted in
    row-major order, i.e. already coalesced, so the tensor satisfies every
    invariant ``check_sparse_tensor_invariants`` enforces while declaring
    itself coalesced. ``values`` is float32 (nnz,).
    """
    rows, cols = _positive_shape(shape)
    if not 1 <= nnz <= rows * cols:
        raise ValueError(f"nnz must be in 1..{rows * cols} for shape {shape}, got {nnz}")
    import numpy as np

    rng = np.random.default_rng(seed)
    # Sampling flat positions without replacement gives distinct coordinates;
    # numpy's Generator does this in O(nnz) even when rows*cols is 2**40.
    flat = np.sort(rng.choice(rows * cols, size=nnz, replace=False).astype(np.int64))
    indices = np.stack([flat // cols, flat % cols]).astype(np.int64)
    values = rng.standard_normal(nnz, dtype=np.float32) * np.float32(_VALUE_SCALE)
    return indices, values


def sparse_coo_declaring(shape: tuple[int, int], nnz: int = 4, seed: int = 0) -> bytes:
    """A valid sparse COO float32 tensor that declares ``shape`` but holds ``nnz`` values.

    The payload stays a few KB whatever ``shape`` says; densified it takes
    ``declared_dense_bytes(shape)`` bytes (4 TiB for (2**20, 2**20)). vLLM
    0.30+ computes that size from the declared shape and refuses it before
    allocating when it exceeds ``VLLM_MAX_EMBED_DECODE_BYTES`` (400, "...
    declares shape (A, B), which would allocate N bytes ..."); 0.28/0.29 call
    ``to_dense()`` unconditionally and fail to allocate (500) or, worse,
    succeed. A small declared shape, e.g. (4, hidden), is simply accepted.
    """
    indices, values = sparse_coo_parts(shape, nnz, seed)
    return save_sparse_coo(indices, values, shape, is_coalesced=True)


def declared_dense_bytes(shape: Sequence[int], dtype_bytes: int = 4) -> int:
    """``numel * element_size`` for ``shape``: what vLLM's ``safe_to_dense`` compares with its limit."""
    total = dtype_bytes
    for dim in shape:
        total *= int(dim)
    return total


def to_base64(payload: bytes) -> str:
    """The string to put in the request's ``prompt_embeds`` field."""
    return base64.b64encode(payload).decode("ascii")


def _positive_shape(shape: tuple[int, int]) -> tuple[int, int]:
    if len(shape) != 2 or any(int(d) < 1 for d in shape):
        raise ValueError(f"shape must be two positive ints, got {shape!r}")
    return int(shape[0]), int(shape[1])
