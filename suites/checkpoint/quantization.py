"""What a vLLM release will do with a quantized checkpoint, read from the checkpoint alone.

The seeds' checklist asks "Do your GPTQ checkpoints use activation ordering?"; this answers it from the model
directory: its quantization config (``config.json``'s ``quantization_config``, else GPTQ's
``quantize_config.json``) and, for GPTQ, its ``g_idx`` tensors (read from the safetensors files' raw bytes, so
neither torch nor safetensors is needed). Facts, each from vLLM's source at the release tags
(docs/gptq.md has the measurements on real servers):

* GPTQ ``desc_act: true`` with groups: 0.28 and 0.29 load ``g_idx`` and the CPU WNA16 kernel honours it;
  0.30 and later refuse to start (``normalize_and_validate_gptq_desc_act`` in
  ``vllm/model_executor/layers/quantization/utils/gptq_utils.py``), also when a ``dynamic`` rule turns it on
  for some modules. ``desc_act`` without groups is normalised to false in every release.
* 0.30 and later drop every ``*.g_idx`` tensor without a word (``QuantizationConfig.
  get_checkpoint_weight_mapper`` in ``base_config.py``): harmless where ``g_idx`` is ``i // group_size``
  (no ordering, or static ordering), wrong answers where it is not and ``desc_act`` says false. 0.29 answers
  that checkpoint just as wrong: it reads ``g_idx`` only under ``desc_act`` (``has_g_idx=desc_act`` in
  ``auto_gptq.py``; ``CPUWNA16LinearKernel.process_weights_after_loading`` sets it to None otherwise), measured
  bit for bit the same as 0.32 (tests/integration/test_gptq_quality_on_real_vllm.py).
* GPTQ ``bits`` and ``sym`` other than 4 or 8 bits, symmetric, are refused by every release, in the config
  (``AutoGPTQConfig.TYPE_MAP`` in ``auto_gptq.py``) and in each module a positive ``dynamic`` rule overrides
  (``override_config`` in ``gptq_utils.py``); so is a config without ``bits``, ``group_size``, ``desc_act`` or
  ``sym`` (fact ``gptq_supported_types``, with vLLM's words).
* compressed-tensors ``actorder: group`` or ``dynamic``: 0.30 and later refuse to start
  (``compressed_tensors.py``).
"""

from __future__ import annotations

import json
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from pytest_vllm_conformance.connection.model_dir import quantization_config

GPTQ_METHODS = frozenset({"gptq", "auto_gptq", "gptq_marlin"})
GPTQ_GROUP_ORDER_REFUSAL = (
    "GPTQ group activation ordering (desc_act=True) is no longer supported. "
    "Use a checkpoint with static activation ordering or desc_act=False."
)
CT_GROUP_ORDER_REFUSAL = (
    "Compressed-tensors group/dynamic activation ordering (actorder={actorder!r}) is no longer supported. "
    "Use a checkpoint with static/weight activation ordering or without activation ordering."
)
REQUANTIZE = "requantize with static activation ordering (GPTQModel's act_group_aware) or without ordering"


# safetensors caps its own header at 100 MB (safetensors' MAX_HEADER_SIZE); a larger one is no checkpoint.
MAX_SAFETENSORS_HEADER = 100_000_000


class CheckpointError(Exception):
    """A checkpoint that cannot be read: one line, naming the file."""


@dataclass(frozen=True)
class Quantization:
    """A checkpoint's quantization, as vLLM reads it."""

    method: str
    source: str
    bits: int | None = None
    group_size: int | None = None
    desc_act: bool = False
    sym: bool = True
    # As the config gives them (vLLM compares them as given: bits 3, sym "false").
    raw_bits: Any = 4
    raw_sym: Any = True
    # The keys vLLM's GPTQ config requires that the config lacks, in the order vLLM reads them.
    missing_keys: tuple[str, ...] = ()
    # Positive ``dynamic`` rules that apply to a module of the checkpoint: (pattern, bits, sym) per module kind.
    dynamic_types: tuple[tuple[str, Any, Any], ...] = ()
    # Module patterns of GPTQ ``dynamic`` rules that turn grouped desc_act on.
    dynamic_desc_act: tuple[str, ...] = ()
    # compressed-tensors: the ``actorder`` of each config group's weights.
    actorders: tuple[str, ...] = ()
    # GPTQ: the g_idx tensors that are not ``i // group_size`` (None: no safetensors read).
    g_idx_out_of_order: tuple[str, ...] | None = field(default=None)
    g_idx_read: int = 0

    @property
    def grouped_act_order(self) -> bool:
        grouped = self.group_size is not None and self.group_size != -1
        return (self.desc_act and grouped) or bool(self.dynamic_desc_act)


@dataclass(frozen=True)
class Prediction:
    """What one release does with the checkpoint: ``refused`` (at start-up), ``wrong`` (starts, answers from
    weights it read wrong, without a word) or ``starts``."""

    outcome: str
    says: str


def read_checkpoint(model_dir: Path) -> Quantization | None:
    """The checkpoint's quantization, or None for a checkpoint vLLM reads as unquantized."""
    declared = quantization_config(model_dir)
    if declared is None:
        return None
    raw, source = declared
    method = str(raw.get("quant_method", "gptq" if source == "quantize_config.json" else "unknown")).lower()
    if method == "compressed-tensors":
        groups = raw.get("config_groups") or {}
        actorders = tuple(
            str((group.get("weights") or {}).get("actorder"))
            for group in groups.values()
            if isinstance(group, dict) and (group.get("weights") or {}).get("actorder")
        )
        return Quantization(method, source, actorders=actorders)
    if method not in GPTQ_METHODS:
        return Quantization(method, source)
    group_size = int(raw.get("group_size", -1))
    dynamic = raw.get("dynamic") or {}
    dynamic_desc_act = tuple(
        pattern
        for pattern, rule in dynamic.items()
        if isinstance(rule, dict)
        and rule.get("desc_act", raw.get("desc_act", False))
        and int(rule.get("group_size", group_size)) != -1
        and not pattern.startswith("-:")
    )
    g_idx_read, out_of_order = _g_idx_tensors(model_dir, group_size)
    required = ("bits", "group_size", "desc_act", "sym")
    return Quantization(
        method,
        source,
        bits=raw.get("bits") if isinstance(raw.get("bits"), int) else None,
        raw_bits=raw.get("bits"),
        raw_sym=raw.get("sym"),
        missing_keys=tuple(key for key in required if key not in raw),
        dynamic_types=_dynamic_types(dynamic, raw.get("bits"), raw.get("sym"), _modules(model_dir)),
        group_size=group_size,
        desc_act=bool(raw.get("desc_act", False)),
        sym=raw.get("sym") is not False,
        dynamic_desc_act=dynamic_desc_act,
        g_idx_out_of_order=out_of_order,
        g_idx_read=g_idx_read,
    )


def _dynamic_types(
    dynamic: Any, bits: Any, sym: Any, modules: tuple[str, ...] | None
) -> tuple[tuple[str, Any, Any], ...]:
    """For each module (or, with no module names read, each positive rule): the (bits, sym) vLLM builds it with
    under the first ``dynamic`` rule matching its name, as ``override_config`` does; modules no rule overrides
    are left out (the config's own pair is checked on its own)."""
    import re

    rules = [(str(pattern), rule) for pattern, rule in (dynamic or {}).items() if isinstance(rule, dict)]
    found: dict[tuple[str, Any, Any], None] = {}
    for name in modules if modules is not None else [None]:
        for pattern, rule in rules:
            negative = pattern.startswith("-:")
            if name is not None:
                try:
                    if re.match(pattern.removeprefix("-:").removeprefix("+:"), name) is None:
                        continue
                except re.error:
                    continue
            elif negative:
                continue
            if not negative:
                rule_bits = rule["bits"] if isinstance(rule.get("bits"), int) else bits
                rule_sym = rule["sym"] if isinstance(rule.get("sym"), bool) else sym
                if (rule_bits, rule_sym) != (bits, sym):
                    found[(pattern, rule_bits, rule_sym)] = None
            if name is not None:
                break  # the first rule matching a module is the one vLLM applies
    return tuple(found)


# vLLM builds a Llama-like model's projections fused (vllm/model_executor/models/llama.py, packed_modules_mapping):
# its module names, which the dynamic rules are matched against, beside the checkpoint's own.
_FUSED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj"}
_FUSED["up_proj"] = "gate_up_proj"


def _modules(model_dir: Path) -> tuple[str, ...] | None:
    """The quantized modules' names (of each ``*.qweight`` tensor, and their fused names), or None when the
    checkpoint's safetensors headers hold none."""
    names: dict[str, None] = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        try:
            header = _header(path)
        except (OSError, ValueError, struct.error) as exc:
            raise CheckpointError(f"{path.name}: not a readable safetensors file ({type(exc).__name__})") from None
        for tensor in sorted(header):
            if tensor.endswith(".qweight"):
                module = tensor.removesuffix(".qweight")
                names[module] = None
                head, _, last = module.rpartition(".")
                if last in _FUSED:
                    names[f"{head}.{_FUSED[last]}"] = None
    return tuple(names) or None


def _header(path: Path) -> dict[str, Any]:
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > MAX_SAFETENSORS_HEADER:
            raise ValueError("header too large")
        header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        raise ValueError("header is not an object")
    return header


def _type_refusal(quantization: Quantization, version: Version) -> str | None:
    """vLLM's words refusing the checkpoint's GPTQ bits and sym (or a missing key), or None (fact
    ``gptq_supported_types``)."""
    from pytest_vllm_conformance.catalogue import contracts

    fact = contracts.load().fact("gptq_supported_types", version)
    if quantization.missing_keys:
        return fact["missing_key"].format(keys=[quantization.missing_keys[0]])
    supported = {tuple(pair) for pair in fact["types"]}

    def refused(bits: Any, sym: Any) -> bool:
        try:
            return (bits, sym) not in supported
        except TypeError:  # an unhashable value (a list, say) is no supported pair either
            return True

    if refused(quantization.raw_bits, quantization.raw_sym):
        return fact["message"].format(bits=quantization.raw_bits, sym=quantization.raw_sym)
    for pattern, bits, sym in quantization.dynamic_types:
        if refused(bits, sym):
            return fact["message"].format(bits=bits, sym=sym) + f" (dynamic rule {pattern})"
    return None


def predict(quantization: Quantization, version: Version) -> Prediction:
    """What vLLM ``version`` does with the checkpoint at start-up and when it answers."""
    from pytest_vllm_conformance.catalogue import contracts

    # The catalogue's fact; the compressed-tensors refusal and the dropped g_idx came with it (in 0.30).
    refuses_grouped = contracts.load().fact("gptq_grouped_act_order", version)["behaviour"] == "refused"
    if quantization.method == "compressed-tensors":
        grouped = [order for order in quantization.actorders if order in ("group", "dynamic")]
        if grouped and refuses_grouped:
            return Prediction("refused", CT_GROUP_ORDER_REFUSAL.format(actorder=grouped[0]) + f"; {REQUANTIZE}")
        return Prediction("starts", f"compressed-tensors, activation ordering {_orders(quantization.actorders)}")
    if quantization.method not in GPTQ_METHODS:
        return Prediction("starts", f"{quantization.method}: not a GPTQ checkpoint; nothing known to check")
    if quantization.missing_keys:  # read before anything else is checked (from_config)
        return Prediction("refused", str(_type_refusal(quantization, version)))
    # AutoGPTQConfig.__init__ checks the ordering (0.30 and later) before the bits and sym.
    if quantization.grouped_act_order and refuses_grouped:
        patterns = ", ".join(quantization.dynamic_desc_act)
        rules = f" (dynamic rules {patterns})" if patterns else ""
        return Prediction("refused", f"{GPTQ_GROUP_ORDER_REFUSAL}{rules}; {REQUANTIZE}")
    refusal = _type_refusal(quantization, version)
    if refusal:
        return Prediction("refused", f"{refusal}; vLLM serves GPTQ at 4 or 8 bits, symmetric")
    if quantization.grouped_act_order:
        return Prediction("starts", "grouped activation ordering (desc_act): g_idx loaded and honoured")
    out_of_order = quantization.g_idx_out_of_order or ()
    if out_of_order:
        # Before 0.30 g_idx is loaded, then dropped by the kernel unless desc_act says true.
        ignored = "drops g_idx without a word" if refuses_grouped else "reads g_idx only under desc_act"
        return Prediction(
            "wrong",
            f"{len(out_of_order)} g_idx tensor(s) not in group order (first {out_of_order[0]}) while desc_act is "
            f"false: vLLM {version} {ignored} and multiplies columns by the wrong groups' scales",
        )
    return Prediction("starts", "no grouped activation ordering: g_idx, if any, is i // group_size")


def describe(quantization: Quantization, version: Version) -> str:
    prediction = predict(quantization, version)
    what = {"refused": "will not start on", "wrong": "starts and answers wrong on", "starts": "starts on"}
    where = f"{quantization.method} ({quantization.source})"
    return f"{where}: {what[prediction.outcome]} vLLM {version}: {prediction.says}"


@dataclass(frozen=True)
class Reading:
    """A checkpoint read for one target release: what the checkpoint suite judges."""

    path: Path
    quantization: Quantization | None
    version: Version

    @property
    def prediction(self) -> Prediction | None:
        return predict(self.quantization, self.version) if self.quantization is not None else None

    def describe(self) -> str:
        return f"{self.path.name}: " + (describe(self.quantization, self.version) if self.quantization else "")

    def why_start_unknown(self) -> str | None:
        """Why nothing is known of this checkpoint's start on the release, or None."""
        if self.quantization is None:
            return "the checkpoint has no quantization config: nothing in it is known to refuse"
        if self.quantization.method not in GPTQ_METHODS | {"compressed-tensors"}:
            return f"{self.quantization.method}: no release fact is known of this quantization method"
        return None

    def why_weights_unknown(self) -> str | None:
        """Why nothing is known of how the release reads the weights, or None."""
        if self.quantization is None or self.quantization.method not in GPTQ_METHODS:
            return "not a GPTQ checkpoint: GPTQ's g_idx is the only weight a release is known to drop"
        if self.prediction is not None and self.prediction.outcome == "refused":
            return f"vLLM {self.version} refuses the checkpoint at start-up, so it reads no weight"
        if not self.quantization.g_idx_read:
            return "no GPTQ g_idx tensor in the checkpoint's safetensors files (none, or none readable as int32)"
        return None


def _orders(actorders: tuple[str, ...]) -> str:
    return ", ".join(sorted(set(actorders))) or "none"


def _g_idx_tensors(model_dir: Path, group_size: int) -> tuple[int, tuple[str, ...] | None]:
    """How many GPTQ g_idx tensors the safetensors files hold, and those not ``i // group_size``."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files or group_size <= 0:
        return 0, None
    read, out_of_order = 0, []
    for path in files:
        try:
            for name, values in _int32_tensors(path, suffix=".g_idx"):
                read += 1
                if any(value != i // group_size for i, value in enumerate(values)):
                    out_of_order.append(name)
        except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            raise CheckpointError(f"{path.name}: not a readable safetensors file ({type(exc).__name__})") from None
    return read, tuple(out_of_order)


def _int32_tensors(path: Path, *, suffix: str) -> Iterator[tuple[str, array]]:
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > MAX_SAFETENSORS_HEADER:
            raise ValueError("header too large")
        header = json.loads(handle.read(length))
        for name, entry in sorted(header.items()):
            if not name.endswith(suffix) or entry.get("dtype") != "I32":
                continue
            begin, end = entry["data_offsets"]
            handle.seek(8 + length + begin)
            values = array("i")
            values.frombytes(handle.read(end - begin))
            yield name, values


RELEASES = ("0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")


def main(argv: list[str] | None = None) -> int:
    """``python -m suites.checkpoint.quantization MODEL_DIR [--target-version X]`` (from a checkout; installed,
    ``python -m pytest_vllm_conformance.suites.checkpoint.quantization``):
    one line per release (the catalogue's, or the one given); exit 1 when the target will not start or
    answer right."""
    import argparse

    parser = argparse.ArgumentParser(description="What each vLLM release does with a quantized checkpoint.")
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--target-version", type=Version, default=None)
    args = parser.parse_args(argv)
    if not (args.model_dir / "config.json").is_file():
        parser.error(f"{args.model_dir}: no config.json: give a model directory (config.json, weights)")
    try:
        quantization = read_checkpoint(args.model_dir)
    except CheckpointError as exc:
        print(f"{args.model_dir}: {exc}")
        return 2
    if quantization is None:
        print(f"{args.model_dir}: no quantization config; vLLM reads it as unquantized")
        return 0
    versions = [args.target_version] if args.target_version else [Version(release) for release in RELEASES]
    for version in versions:
        print(describe(quantization, version))
    return 1 if args.target_version and predict(quantization, args.target_version).outcome != "starts" else 0


if __name__ == "__main__":
    raise SystemExit(main())
