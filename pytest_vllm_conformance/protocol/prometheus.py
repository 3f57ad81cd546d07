"""The one reader of the server's /metrics page, on prometheus_client's own parser.

Scrapers (Prometheus, the dashboards behind it) read the page with a real
parser, so a hand-written regex here would accept pages they refuse. A
family is what vLLM registers (``vllm:num_preemptions``, a counter); a
series is what a dashboard queries (``vllm:num_preemptions_total``): the
parser gives both, and the two checks use the one that matters to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_vllm_conformance.connection.client import BoundedClient, Response

# What the text format appends to a family's name to name its series.
SERIES_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created", "_info", "")


class ExpositionError(ValueError):
    """The page is not Prometheus text."""


@dataclass(frozen=True)
class Family:
    """One family: its type, the series names it exposes, and its sample values (a counter's ``_total`` ones)."""

    name: str
    type: str
    series: frozenset[str]
    values: tuple[float, ...]
    # Each sample's labels, in page order: an info gauge (vllm:cache_config_info) says its facts there.
    labels: tuple[Mapping[str, str], ...] = ()


@dataclass(frozen=True)
class Exposition:
    families: Mapping[str, Family]

    @property
    def series_names(self) -> frozenset[str]:
        return frozenset(name for family in self.families.values() for name in family.series)

    def family(self, name: str) -> Family | None:
        return self.families.get(name)

    def names_with_prefix(self, prefix: str) -> list[str]:
        return sorted(name for name in self.families if name.startswith(prefix))

    def total(self, name: str) -> float | None:
        """The sum of a family's samples over every label set (a counter's ``_total`` ones), or None if absent."""
        family = self.families.get(name)
        return sum(family.values) if family is not None else None


def parse(text: str) -> Exposition:
    """Every family on the page; ExpositionError names the first line the parser refuses."""
    # Imported here: the plugin loads this module at every start-up (the capture,
    # the cases), and only runs that read /metrics need the parser.
    from prometheus_client.parser import text_string_to_metric_families

    families = {}
    try:
        # A generator: the page is only checked as far as it is consumed.
        for family in text_string_to_metric_families(text):
            counted = [s.value for s in family.samples if family.type != "counter" or s.name.endswith("_total")]
            families[family.name] = Family(
                family.name,
                family.type,
                frozenset(s.name for s in family.samples),
                tuple(counted),
                tuple(dict(s.labels) for s in family.samples),
            )
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise ExpositionError(f"not Prometheus text: {exc}") from None
    return Exposition(families)


@dataclass(frozen=True)
class Reading:
    """The metrics page at one moment, parsed, or why it could not be read (``problem``)."""

    exposition: Exposition | None
    problem: str = ""

    def total(self, name: str | None) -> float | None:
        """A family's total (``Exposition.total``), or None: not read, not exported, or no name asked."""
        return self.exposition.total(name) if self.exposition is not None and name else None


def reading_of(page: Response | None) -> Reading:
    """``page`` (None: it never answered) as a Reading: only a whole 200 page of Prometheus text is read."""
    if page is None:
        return Reading(None, "no answer")
    if page.status != 200 or page.truncated:
        return Reading(None, page.describe())
    try:
        return Reading(parse(page.text))
    except ExpositionError as exc:
        return Reading(None, str(exc))


def read(client: BoundedClient, path: str) -> Reading:
    """The server's metrics page now. Never raises: observers record what they could not see instead."""
    return reading_of(client.answer_or_none("GET", path))


def info_labels(reading: Reading, name: str) -> Mapping[str, str]:
    """The labels of an info gauge's first sample (vLLM's ``vllm:cache_config_info``); empty: not read, or absent."""
    family = reading.exposition.family(name) if reading.exposition is not None else None
    return family.labels[0] if family is not None and family.labels else {}


def prefix_caching(reading: Reading) -> bool | None:
    """What vllm:cache_config_info says of enable_prefix_caching; None: not read, or not on the page.

    vLLM exports its CacheConfig as this info gauge's labels (vllm/v1/metrics/loggers.py, log_metrics_info,
    and vllm/config/cache.py, metrics_info, at v0.28.0, v0.29.0 and v0.32.0).
    """
    info = reading.exposition.family("vllm:cache_config_info") if reading.exposition is not None else None
    for labels in info.labels if info is not None else ():
        if "enable_prefix_caching" in labels:
            return labels["enable_prefix_caching"] == "True"
    return None


@dataclass(frozen=True)
class KvCacheSize:
    """The KV cache's blocks, their size in tokens, and how many the block pool holds back."""

    blocks: int
    block_size: int
    held_back: int

    @property
    def tokens(self) -> int:
        return (self.blocks - self.held_back) * self.block_size

    def __str__(self) -> str:
        return f"{self.tokens} tokens: {self.blocks} blocks of {self.block_size}, {self.held_back} held back"


def kv_cache_size(reading: Reading, capacity: Mapping[str, Any]) -> KvCacheSize | None:
    """The KV cache's size as the info gauge the release's ``kv_cache_capacity`` fact names says it (its labels for
    the blocks and their size, and the blocks held back); None: not read, or not on the page."""
    labels = info_labels(reading, capacity["info"])
    try:
        blocks, size = int(labels[capacity["blocks"]]), int(labels[capacity["block_size"]])
    except (KeyError, ValueError):
        return None
    return KvCacheSize(blocks, size, int(capacity["held_back_blocks"]))


def family_names(text: str, *, cut: bool = False) -> list[str]:
    """The families a page names, as its ``# TYPE`` lines do (a counter by its ``_total`` series), read as far as
    the parser accepts; ``cut``: the page passed the byte cap, its last line is partial and left out, the
    families before it still named. ``*_created`` timestamps are not metrics of their own."""
    from prometheus_client.parser import text_string_to_metric_families

    if cut:
        text = text.rsplit("\n", 1)[0] + "\n"

    names = set()
    try:
        for family in text_string_to_metric_families(text):
            counter_total = family.type == "counter" and any(s.name == family.name + "_total" for s in family.samples)
            names.add(family.name + "_total" if counter_total else family.name)
    except (ValueError, IndexError, KeyError, TypeError):
        pass
    return sorted(name for name in names if not name.endswith("_created"))
