"""``torch.save``'s file format, written from numpy arrays and the stdlib (see tensor_payload.py for why).

A zip archive as torch's C++ writer lays it out, holding a protocol-2
pickle emitted opcode by opcode, and the storages' little-endian bytes.
"""

from __future__ import annotations

import hashlib
import pickle
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["save_dense", "save_sparse_coo"]

#: torch's legacy storage class for each numpy dtype (by name) we write. The
#: persistent id names the storage by this class, and ``torch.load`` takes the
#: element dtype from it.
_STORAGE_CLASS: dict[str, str] = {
    "float32": "FloatStorage",
    "float64": "DoubleStorage",
    "float16": "HalfStorage",
    "int64": "LongStorage",
    "int32": "IntStorage",
    "int16": "ShortStorage",
    "int8": "CharStorage",
    "uint8": "ByteStorage",
    "bool": "BoolStorage",
}

#: What torch names the archive's top folder when saving to a file object.
_ARCHIVE = "archive"
#: ``torch.serialization._get_storage_alignment()`` default; entry data starts
#: on this boundary so torch can mmap storages in place.
_ALIGNMENT = 64
#: Contents of ``archive/version``: the file-format version ``torch.save``
#: writes for plain tensors (checked against torch 2.13).
_FILE_FORMAT_VERSION = b"3\n"


# --------------------------------------------------------------------------
# General writers
# --------------------------------------------------------------------------


def save_dense(array: np.ndarray, *, serialization_id: str | None = None) -> bytes:
    """``torch.save`` bytes of a contiguous dense tensor with ``array``'s dtype, shape and values.

    ``serialization_id`` (40 decimal digits in torch) is random in torch's own
    output; by default we derive it from the content so payloads are
    deterministic. Pass torch's to reproduce a ``torch.save`` file byte for byte.
    """
    pickler = _TorchPickle()
    storages = _Storages()
    pickler.tensor(storages.add(array))
    return _archive(pickler.finish(), storages.blobs, serialization_id)


def save_sparse_coo(
    indices: np.ndarray,
    values: np.ndarray,
    shape: Sequence[int],
    *,
    is_coalesced: bool = False,
    serialization_id: str | None = None,
) -> bytes:
    """``torch.save`` bytes of a sparse COO tensor, exactly as given.

    Nothing is validated: an out-of-bounds index, or ``is_coalesced=True`` on
    unsorted indices, produces a payload that ``torch.load`` rejects only when
    sparse invariant checks are on (vLLM turns them on). ``indices`` must be
    int64 (sparse_dim, nnz).
    """
    import numpy as np

    indices = np.asarray(indices)
    if indices.dtype != np.int64 or indices.ndim != 2:
        raise ValueError(f"indices must be int64 of shape (sparse_dim, nnz), got {indices.dtype} {indices.shape}")
    pickler = _TorchPickle()
    storages = _Storages()
    # The order matters for byte equality with torch: indices first, then values,
    # then the size, in one tuple -- Tensor._reduce_ex_internal's order.
    pickler.sparse_coo(storages.add(indices), storages.add(np.asarray(values)), tuple(shape), is_coalesced)
    return _archive(pickler.finish(), storages.blobs, serialization_id)


# --------------------------------------------------------------------------
# Tensor -> storages
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _TensorRef:
    """A dense tensor viewing the whole of one storage, contiguous."""

    storage_class: str
    key: str
    numel: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class _Storages:
    """Collects storage bytes in the order torch numbers them (``data/0``, ``data/1``...)."""

    def __init__(self) -> None:
        self.blobs: list[bytes] = []

    def add(self, array: np.ndarray) -> _TensorRef:
        import numpy as np

        # A '>f4' array is still float32: the name ignores byte order.
        dtype = array.dtype.newbyteorder("=")
        if dtype.name not in _STORAGE_CLASS:
            raise ValueError(f"no torch storage class for dtype {array.dtype}")
        key = str(len(self.blobs))
        # We record "little" in archive/byteorder, so the bytes must be
        # little-endian whatever the host or the array's own byte order.
        little = np.ascontiguousarray(array, dtype=dtype.newbyteorder("<"))
        self.blobs.append(little.tobytes())
        shape = tuple(int(d) for d in array.shape)
        return _TensorRef(_STORAGE_CLASS[dtype.name], key, int(array.size), shape, _contiguous_stride(shape))


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides torch gives a contiguous tensor of ``shape``.

    Like C order in elements, except that torch treats a 0-length dim as
    length 1 when computing the strides of the dims before it.
    """
    stride: list[int] = []
    step = 1
    for dim in reversed(shape):
        stride.append(step)
        step *= max(dim, 1)
    return tuple(reversed(stride))


# --------------------------------------------------------------------------
# Pickle (protocol 2), memoized the way CPython's pickler does for torch
# --------------------------------------------------------------------------

# The stdlib's own opcode constants: we only sequence them by hand.
_PROTO = pickle.PROTO
_GLOBAL = pickle.GLOBAL
_BINPUT = pickle.BINPUT
_LONG_BINPUT = pickle.LONG_BINPUT
_BINGET = pickle.BINGET
_LONG_BINGET = pickle.LONG_BINGET
_MARK = pickle.MARK
_TUPLE = pickle.TUPLE
_EMPTY_TUPLE = pickle.EMPTY_TUPLE
_TUPLE_N = {1: pickle.TUPLE1, 2: pickle.TUPLE2, 3: pickle.TUPLE3}
_BINUNICODE = pickle.BINUNICODE
_BININT1 = pickle.BININT1
_BININT2 = pickle.BININT2
_BININT = pickle.BININT
_LONG1 = pickle.LONG1
_NEWTRUE = pickle.NEWTRUE
_NEWFALSE = pickle.NEWFALSE
_REDUCE = pickle.REDUCE
_BINPERSID = pickle.BINPERSID
_STOP = pickle.STOP


class _TorchPickle:
    """Writes the opcodes ``torch.save``'s pickler writes for a tensor.

    CPython memoizes (BINPUT) every string, tuple, global and REDUCE result
    it writes, and refers back (BINGET) when it meets the same object again.
    In torch's pickles the repeats are the rebuild function, the
    ``OrderedDict`` class, and the interned strings ``"storage"`` and
    ``"cpu"``, so memoizing globals and strings by value reproduces it.
    """

    def __init__(self) -> None:
        self._out = bytearray(_PROTO + b"\x02")
        self._memo: dict[tuple[str, object], int] = {}
        self._memo_size = 0

    def finish(self) -> bytes:
        return bytes(self._out + _STOP)

    # -- tensors -----------------------------------------------------------

    def tensor(self, ref: _TensorRef) -> None:
        """``_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks)``."""
        self._global("torch._utils", "_rebuild_tensor_v2")
        self._out += _MARK
        self._storage(ref)
        self._int(0)  # storage offset: the tensor views its storage from the start
        self._tuple_of_ints(ref.shape)
        self._tuple_of_ints(ref.stride)
        self._out += _NEWFALSE  # requires_grad
        # backward_hooks: torch always pickles an empty OrderedDict here (kept for BC).
        self._global("collections", "OrderedDict")
        self._out += _EMPTY_TUPLE
        self._reduce()
        self._close_tuple()
        self._reduce()

    def sparse_coo(self, indices: _TensorRef, values: _TensorRef, shape: tuple[int, ...], is_coalesced: bool) -> None:
        """``_rebuild_sparse_tensor(_get_layout("torch.sparse_coo"), (indices, values, Size(shape), is_coalesced))``."""
        self._global("torch._utils", "_rebuild_sparse_tensor")
        # torch.layout pickles through copyreg as _get_layout(str(layout)).
        self._global("torch.serialization", "_get_layout")
        self._string("torch.sparse_coo")
        self._small_tuple(1)
        self._reduce()
        self._out += _MARK
        self.tensor(indices)
        self.tensor(values)
        self._global("torch", "Size")
        self._tuple_of_ints(shape)
        self._small_tuple(1)
        self._reduce()
        self._out += _NEWTRUE if is_coalesced else _NEWFALSE
        self._close_tuple()
        self._small_tuple(2)
        self._reduce()

    def _storage(self, ref: _TensorRef) -> None:
        """The persistent id torch's ``persistent_id`` returns, then BINPERSID.

        ``torch.load``'s ``persistent_load`` reads ``numel`` elements of the
        storage class's dtype from ``archive/data/<key>``.
        """
        self._out += _MARK
        self._string("storage")
        self._global("torch", ref.storage_class)
        self._string(ref.key)
        self._string("cpu")
        self._int(ref.numel)
        self._close_tuple()
        self._out += _BINPERSID

    # -- primitives ----------------------------------------------------------

    def _global(self, module: str, name: str) -> None:
        if self._get(("global", (module, name))):
            return
        self._out += _GLOBAL + f"{module}\n{name}\n".encode("ascii")
        self._put(("global", (module, name)))

    def _string(self, text: str) -> None:
        if self._get(("str", text)):
            return
        encoded = text.encode("utf-8")
        self._out += _BINUNICODE + struct.pack("<I", len(encoded)) + encoded
        self._put(("str", text))

    def _int(self, value: int) -> None:
        if 0 <= value < 0x100:
            self._out += _BININT1 + struct.pack("<B", value)
        elif 0 <= value < 0x10000:
            self._out += _BININT2 + struct.pack("<H", value)
        elif -0x80000000 <= value < 0x80000000:
            self._out += _BININT + struct.pack("<i", value)
        else:
            # Dims past 2**31 (a declared sparse shape can be anything).
            encoded = value.to_bytes((value.bit_length() >> 3) + 1, "little", signed=True)
            self._out += _LONG1 + struct.pack("<B", len(encoded)) + encoded

    def _tuple_of_ints(self, values: tuple[int, ...]) -> None:
        if not values:
            self._out += _EMPTY_TUPLE  # CPython does not memoize the empty tuple
            return
        if len(values) <= 3:
            for value in values:
                self._int(value)
            self._small_tuple(len(values))
            return
        self._out += _MARK
        for value in values:
            self._int(value)
        self._close_tuple()

    def _small_tuple(self, length: int) -> None:
        """TUPLE1/2/3 over the last ``length`` stack items, memoized."""
        self._out += _TUPLE_N[length]
        self._put(None)

    def _close_tuple(self) -> None:
        """TUPLE back to the last MARK, memoized (CPython uses it for 4+ items)."""
        self._out += _TUPLE
        self._put(None)

    def _reduce(self) -> None:
        self._out += _REDUCE
        self._put(None)

    def _put(self, key: tuple[str, object] | None) -> None:
        """Memoize the object just written; ``key`` is None for one never met again.

        Tuples and REDUCE results are never repeated in torch's pickles, but
        CPython still gives each a memo slot, so they take an index too.
        """
        index = self._memo_size
        self._memo_size += 1
        if key is not None:
            self._memo[key] = index
        if index < 0x100:
            self._out += _BINPUT + struct.pack("<B", index)
        else:
            self._out += _LONG_BINPUT + struct.pack("<I", index)

    def _get(self, key: tuple[str, object]) -> bool:
        """Refer back to an already-written object; False if there is none."""
        index = self._memo.get(key)
        if index is None:
            return False
        if index < 0x100:
            self._out += _BINGET + struct.pack("<B", index)
        else:
            self._out += _LONG_BINGET + struct.pack("<I", index)
        return True


# --------------------------------------------------------------------------
# Zip archive, laid out as torch's PyTorchStreamWriter (miniz) writes it
# --------------------------------------------------------------------------

_LOCAL_HEADER = struct.Struct("<4s5H3I2H")
_DATA_DESCRIPTOR = struct.Struct("<4sIII")
_CENTRAL_HEADER = struct.Struct("<4s6H3I5H2I")
_ZIP64_END = struct.Struct("<4sQHHIIQQQQ")
_ZIP64_LOCATOR = struct.Struct("<4sIQI")
_END = struct.Struct("<4sHHHHIIH")

#: General-purpose flags: bit 11 (names are UTF-8) always; bit 3 (sizes and
#: CRC follow the data in a descriptor) for every entry with data, as miniz
#: streams them.
_FLAG_UTF8 = 0x0800
_FLAG_DESCRIPTOR = 0x0008
#: "Version made by" / "needed" miniz writes in the zip64 end record (3.0 / 4.5).
_ZIP64_MADE_BY = 0x031E
_ZIP64_NEEDED = 0x002D
#: Offsets and sizes at or above this need zip64 extra fields, which this
#: writer does not emit: it refuses archives that would come near it.
_ZIP32_LIMIT = 0xFFFFFFFF


def _archive(data_pkl: bytes, storages: list[bytes], serialization_id: str | None) -> bytes:
    """The full ``torch.save`` zip: records in the order ``torch.save`` writes them."""
    records: list[tuple[str, bytes]] = [
        ("data.pkl", data_pkl),
        # Storages are numbered in the order the pickle met them (format 1),
        # and start on 64-byte boundaries (the alignment record says so).
        (".format_version", b"1"),
        (".storage_alignment", str(_ALIGNMENT).encode("ascii")),
        ("byteorder", b"little"),
        *((f"data/{key}", blob) for key, blob in enumerate(storages)),
        ("version", _FILE_FORMAT_VERSION),
    ]
    if serialization_id is None:
        serialization_id = _content_serialization_id(records)
    records.append((".data/serialization_id", serialization_id.encode("ascii")))
    return _zip_stored(records)


def _content_serialization_id(records: list[tuple[str, bytes]]) -> str:
    """40 decimal digits like torch's, but derived from the content, not random.

    ``torch.load`` does not need it (an archive without the record loads
    too); we write it only to keep torch's layout.
    """
    digest = hashlib.sha256()
    for name, data in records:
        digest.update(name.encode("utf-8") + b"\0" + data)
    first, second = struct.unpack("<QQ", digest.digest()[:16])
    return f"{first:020d}{second:020d}"


def _zip_stored(records: list[tuple[str, bytes]]) -> bytes:
    out = bytearray()
    central = bytearray()
    for name, data in records:
        full_name = f"{_ARCHIVE}/{name}".encode()
        offset = len(out)
        # Headroom for this entry's header and the central directory after it.
        if offset + len(data) + 4096 >= _ZIP32_LIMIT:
            raise ValueError("payloads of 4 GiB or more need zip64 entries, which this writer does not emit")
        crc = zlib.crc32(data)
        flags = _FLAG_UTF8 | (_FLAG_DESCRIPTOR if data else 0)
        extra = _alignment_padding(offset, len(full_name))
        # The local header leaves CRC and sizes zero, as a streaming writer
        # must; they follow the data in the descriptor and sit in the central
        # directory.
        out += _LOCAL_HEADER.pack(b"PK\x03\x04", 0, flags, 0, 0, 0, 0, 0, 0, len(full_name), len(extra))
        out += full_name + extra + data
        if data:
            out += _DATA_DESCRIPTOR.pack(b"PK\x07\x08", crc, len(data), len(data))
        central += _CENTRAL_HEADER.pack(
            b"PK\x01\x02", 0, 0, flags, 0, 0, 0, crc, len(data), len(data), len(full_name), 0, 0, 0, 0, 0, offset
        )
        central += full_name
    central_offset = len(out)
    out += central
    zip64_end_offset = len(out)
    count = len(records)
    out += _ZIP64_END.pack(
        b"PK\x06\x06",
        _ZIP64_END.size - 12,
        _ZIP64_MADE_BY,
        _ZIP64_NEEDED,
        0,
        0,
        count,
        count,
        len(central),
        central_offset,
    )
    out += _ZIP64_LOCATOR.pack(b"PK\x06\x07", 0, zip64_end_offset, 1)
    out += _END.pack(b"PK\x05\x06", 0, 0, count, count, len(central), central_offset, 0)
    return bytes(out)


def _alignment_padding(header_offset: int, name_length: int) -> bytes:
    """The ``FB`` extra field that makes this entry's data start on a 64-byte boundary.

    Mirrors ``getPadding`` in torch's ``caffe2/serialize/inline_container.cc``:
    the data starts after the 30-byte local header, the name, and the 4-byte
    extra-field header; the padding is ``Z`` bytes.
    """
    start = header_offset + _LOCAL_HEADER.size + name_length + 4
    padding = -start % _ALIGNMENT
    return b"FB" + struct.pack("<H", padding) + b"Z" * padding
