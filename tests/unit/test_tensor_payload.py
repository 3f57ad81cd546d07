"""The torch-free ``torch.save`` writer: torch (and vLLM's loader) read what it writes.

Everything but the import test needs torch (``pytest.importorskip``); the
vLLM tests also need vLLM 0.30+ importable in-process.
"""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from suites.embedding_limits import tensor_payload as tp

REPO = Path(__file__).resolve().parents[2]
HIDDEN = 128
HUGE = (1 << 20, 1 << 20)


@pytest.fixture(scope="module")
def torch() -> ModuleType:
    return pytest.importorskip("torch")


def load(torch: ModuleType, payload: bytes):
    """What vLLM does with the decoded bytes (renderers/embed_utils.py)."""
    with torch.sparse.check_sparse_tensor_invariants():
        return torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")


def torch_save(torch: ModuleType, tensor) -> bytes:
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    return buffer.getvalue()


def serialization_id(payload: bytes) -> str:
    return zipfile.ZipFile(io.BytesIO(payload)).read("archive/.data/serialization_id").decode("ascii")


# -- no torch at import or build time -------------------------------------------


def test_module_neither_imports_nor_needs_torch():
    # torch is blocked outright, so a lazy import inside a builder fails too.
    script = """
import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
sys.meta_path.insert(0, NoTorch())
from suites.embedding_limits import tensor_payload as tp
tp.dense_float32(3, 8); tp.dense_with_batch(3, 8); tp.dense_int64(3, 8)
tp.sparse_coo_declaring((1 << 20, 1 << 20))
print(sorted(name for name in sys.modules if name == "torch" or name.startswith("torch.")))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# -- what torch.load makes of each payload --------------------------------------


def test_dense_float32_loads_as_the_numpy_values(torch):
    tensor = load(torch, tp.dense_float32(5, HIDDEN, seed=3))
    assert tensor.dtype == torch.float32
    assert tensor.layout == torch.strided
    assert tuple(tensor.shape) == (5, HIDDEN)
    assert tensor.is_contiguous()
    np.testing.assert_array_equal(tensor.numpy(), tp.dense_values(5, HIDDEN, seed=3))
    # Small, embedding-like values: nothing a model would choke on.
    assert float(tensor.abs().max()) < 0.2


def test_dense_with_batch_adds_only_a_leading_dim(torch):
    tensor = load(torch, tp.dense_with_batch(5, HIDDEN, seed=3))
    assert tensor.dtype == torch.float32
    assert tuple(tensor.shape) == (1, 5, HIDDEN)
    assert tensor.is_contiguous()
    np.testing.assert_array_equal(tensor.squeeze(0).numpy(), tp.dense_values(5, HIDDEN, seed=3))


def test_dense_int64_is_an_integer_tensor(torch):
    tensor = load(torch, tp.dense_int64(5, HIDDEN))
    assert tensor.dtype == torch.int64
    assert not tensor.is_floating_point()
    assert tuple(tensor.shape) == (5, HIDDEN)
    assert int(tensor.min()) >= 0 and int(tensor.max()) < 1000


def test_sparse_declaring_a_huge_shape_holds_only_its_values(torch):
    payload = tp.sparse_coo_declaring(HUGE, nnz=4, seed=7)
    assert len(payload) < 8 * 1024
    tensor = load(torch, payload)  # passes the sparse invariant checks
    indices, values = tp.sparse_coo_parts(HUGE, nnz=4, seed=7)
    assert tensor.layout == torch.sparse_coo
    assert tensor.dtype == torch.float32
    assert tuple(tensor.shape) == HUGE
    assert tensor._nnz() == 4
    assert tensor.is_coalesced()
    np.testing.assert_array_equal(tensor._indices().numpy(), indices)
    np.testing.assert_array_equal(tensor._values().numpy(), values)
    assert (indices >= 0).all()
    assert (indices < np.array(HUGE).reshape(2, 1)).all()
    # The size vLLM's safe_to_dense computes before refusing.
    assert tensor.numel() * tensor.element_size() == tp.declared_dense_bytes(HUGE) == 4 << 40


def test_small_sparse_densifies_to_its_values(torch):
    tensor = load(torch, tp.sparse_coo_declaring((4, HIDDEN), nnz=6, seed=1))
    indices, values = tp.sparse_coo_parts((4, HIDDEN), nnz=6, seed=1)
    expected = np.zeros((4, HIDDEN), dtype=np.float32)
    expected[indices[0], indices[1]] = values
    np.testing.assert_array_equal(tensor.to_dense().numpy(), expected)


def test_every_position_can_be_filled(torch):
    # nnz == rows * cols: the distinct-coordinates sampling must not run dry.
    tensor = load(torch, tp.sparse_coo_declaring((3, 4), nnz=12))
    assert tensor._nnz() == 12
    assert (tensor.to_dense() != 0).all()


def test_invariant_checks_are_really_on_in_these_tests(torch):
    # Guards the tests above: an out-of-bounds index must be refused by the
    # load they use, or "passes the invariant checks" would mean nothing.
    bad = tp.save_sparse_coo(np.array([[0, 4], [0, 0]], dtype=np.int64), np.ones(2, np.float32), (4, HIDDEN))
    with pytest.raises(RuntimeError, match="inconsistent with indices"):
        load(torch, bad)


# -- determinism and identity with torch.save -------------------------------------

BUILDERS: dict[str, Callable[[], bytes]] = {
    "dense_float32": lambda: tp.dense_float32(5, HIDDEN),
    "dense_with_batch": lambda: tp.dense_with_batch(5, HIDDEN),
    "dense_int64": lambda: tp.dense_int64(5, HIDDEN),
    "sparse_huge": lambda: tp.sparse_coo_declaring(HUGE),
    "sparse_small": lambda: tp.sparse_coo_declaring((4, HIDDEN), nnz=1),
}


@pytest.mark.parametrize("name", BUILDERS)
def test_payloads_are_deterministic(name):
    assert BUILDERS[name]() == BUILDERS[name]()


def test_seed_changes_the_payload():
    assert tp.dense_float32(5, HIDDEN, seed=0) != tp.dense_float32(5, HIDDEN, seed=1)
    assert tp.sparse_coo_declaring(HUGE, seed=0) != tp.sparse_coo_declaring(HUGE, seed=1)


@pytest.mark.parametrize("name", BUILDERS)
def test_identical_to_torch_save_but_for_the_random_id(torch, name):
    ours = BUILDERS[name]()
    loaded = load(torch, ours)
    theirs = torch_save(torch, loaded)
    # torch's serialization_id is random per save; everything else must match
    # byte for byte: zip layout, alignment padding, pickle opcodes, storages.
    # (save_dense/save_sparse_coo take the id so the whole file can be compared.)
    if loaded.layout == torch.sparse_coo:
        rebuilt = tp.save_sparse_coo(
            loaded._indices().numpy(),
            loaded._values().numpy(),
            tuple(loaded.shape),
            is_coalesced=loaded.is_coalesced(),
            serialization_id=serialization_id(theirs),
        )
    else:
        rebuilt = tp.save_dense(loaded.numpy(), serialization_id=serialization_id(theirs))
    assert rebuilt == theirs
    assert zipfile.ZipFile(io.BytesIO(ours)).namelist() == zipfile.ZipFile(io.BytesIO(theirs)).namelist()


@pytest.mark.parametrize(
    "shape", [(0, 4), (3, 0), (1, 1), (7,), (), (2, 3, 4, 5)], ids=lambda s: "x".join(map(str, s)) or "scalar"
)
def test_edge_shapes_match_torch_save(torch, shape):
    # Empty storages change the zip layout (no data descriptor) and 0-length
    # dims change torch's strides; both must still match torch.
    tensor = torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape)
    theirs = torch_save(torch, tensor)
    assert tp.save_dense(tensor.numpy(), serialization_id=serialization_id(theirs)) == theirs


def test_large_ints_in_a_declared_shape_match_torch_save(torch):
    # Dims past 2**31 are pickled as LONG1, not BININT.
    shape = (1 << 33, 3)
    indices, values = tp.sparse_coo_parts(shape, nnz=5)
    tensor = torch.sparse_coo_tensor(torch.from_numpy(indices), torch.from_numpy(values), shape, is_coalesced=True)
    theirs = torch_save(torch, tensor)
    ours = tp.save_sparse_coo(indices, values, shape, is_coalesced=True, serialization_id=serialization_id(theirs))
    assert ours == theirs


def test_big_endian_input_is_written_little_endian(torch):
    values = np.arange(6, dtype=">f4").reshape(2, 3)
    assert tp.save_dense(values) == tp.save_dense(values.astype("<f4"))
    np.testing.assert_array_equal(load(torch, tp.save_dense(values)).numpy(), values)


# -- small helpers ---------------------------------------------------------------


def test_declared_dense_bytes():
    assert tp.declared_dense_bytes(HUGE) == 4_398_046_511_104
    assert tp.declared_dense_bytes((4_194_305, 128)) == 2_147_484_160  # 2 GiB + 512 B
    assert tp.declared_dense_bytes((5, HIDDEN), dtype_bytes=2) == 1280


def test_to_base64_round_trips():
    payload = tp.dense_float32(2, 8)
    encoded = tp.to_base64(payload)
    assert isinstance(encoded, str)
    assert base64.b64decode(encoded, validate=True) == payload


@pytest.mark.parametrize("shape, nnz", [((0, 4), 1), ((4,), 1), ((2, 2), 5), ((2, 2), 0)])
def test_sparse_builder_refuses_what_it_cannot_make_valid(shape, nnz):
    with pytest.raises(ValueError):
        tp.sparse_coo_declaring(shape, nnz=nnz)


# -- vLLM's own loader, in-process ------------------------------------------------


@pytest.fixture(scope="module")
def vllm_loader(torch):
    embed_utils = pytest.importorskip("vllm.renderers.embed_utils", reason="needs vLLM 0.30+ in-process")
    pytest.importorskip("vllm.utils.sparse_utils", reason="the size bound arrived in vLLM 0.30")
    from vllm.exceptions import VLLMValidationError

    # The three ModelConfig attributes safe_load_prompt_embeds reads.
    model_config = SimpleNamespace(enable_prompt_embeds=True, get_hidden_size=lambda: HIDDEN, dtype=torch.float32)

    def load_embeds(payload: bytes):
        return embed_utils.safe_load_prompt_embeds(model_config, tp.to_base64(payload))

    return load_embeds, VLLMValidationError


@pytest.fixture
def default_limit(monkeypatch):
    monkeypatch.delenv("VLLM_MAX_EMBED_DECODE_BYTES", raising=False)


def test_vllm_accepts_dense_and_batched(vllm_loader, default_limit):
    load_embeds, _ = vllm_loader
    expected = tp.dense_values(5, HIDDEN)
    np.testing.assert_array_equal(load_embeds(tp.dense_float32(5, HIDDEN)).numpy(), expected)
    np.testing.assert_array_equal(load_embeds(tp.dense_with_batch(5, HIDDEN)).numpy(), expected)


def test_vllm_densifies_a_small_sparse_tensor(vllm_loader, default_limit):
    load_embeds, _ = vllm_loader
    tensor = load_embeds(tp.sparse_coo_declaring((4, HIDDEN)))
    assert tuple(tensor.shape) == (4, HIDDEN)
    assert int((tensor != 0).sum()) == 4


def test_vllm_refuses_integers(vllm_loader, default_limit):
    load_embeds, refused = vllm_loader
    with pytest.raises(refused, match="torch.int64 is not a floating-point type"):
        load_embeds(tp.dense_int64(5, HIDDEN))


def test_vllm_refuses_the_huge_declaration_by_its_size_bound(vllm_loader, default_limit):
    load_embeds, refused = vllm_loader
    with pytest.raises(refused) as caught:
        load_embeds(tp.sparse_coo_declaring(HUGE))
    message = str(caught.value)
    assert "`prompt_embeds` declares shape (1048576, 1048576), which would allocate 4398046511104 bytes" in message
    assert "exceeding the 2147483648 byte limit" in message
