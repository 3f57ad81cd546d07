"""The server's /metrics page, read with prometheus_client's own parser.

Scrapers (Prometheus, the dashboards behind it) read the page with a real
parser, so a hand-written regex here would accept pages they refuse. A
family is what vLLM registers (``vllm:num_preemptions``, a counter); a
series is what a dashboard queries (``vllm:num_preemptions_total``): the
parser gives both, and the two checks use the one that matters to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_vllm_conformance.catalogue.cases import CaseContext, Named, since

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
                family.name, family.type, frozenset(s.name for s in family.samples), tuple(counted)
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


@dataclass(frozen=True)
class ExpectedFamily:
    """A family the server's version registers (since ``since``), for the feature ``when`` names."""

    name: str
    type: str
    since: str
    when: str | None = None

    @property
    def id(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name

    def why(self, version_label: str) -> str:
        reason = f"{version_label} registers it (since {self.since})"
        return reason + (f" and the profile declares {self.when}" if self.when else "")


@dataclass(frozen=True)
class SeriesGap:
    """A series a dashboard queries that the page does not have, and what to query instead."""

    name: str
    replacements: tuple[str, ...]
    reason: str

    def describe(self, version_label: str) -> str:
        text = f"the dashboard series {self.name} is not exported by {version_label}: {self.reason}"
        if self.replacements:
            text += f"; query {' or '.join(self.replacements)} instead"
        return text


def series_gap(
    name: str,
    exposition: Exposition,
    renames: Mapping[str, str],
    conditions: Mapping[str, str],
) -> SeriesGap | None:
    """None when ``name`` is served; else why not, with the version's replacement when one is known."""
    served = exposition.series_names
    if name in served:
        return None
    family = exposition.family(name)
    if family is not None:
        series = tuple(sorted(s for s in family.series if not s.endswith("_created")))
        return SeriesGap(name, series, f"it is a {family.type} family, queried by its series")
    for old, new in renames.items():
        for suffix in SERIES_SUFFIXES:
            if name == old + suffix:
                condition = next((c for prefix, c in conditions.items() if new.startswith(prefix)), None)
                reason = f"renamed to {new}" + (f", exported only {condition}" if condition else "")
                return SeriesGap(name, (new + suffix,), reason)
    if name + "_total" in served:
        return SeriesGap(name, (name + "_total",), "the series carries the _total suffix")
    for prefix, condition in conditions.items():
        if name.startswith(prefix):
            return SeriesGap(name, (), f"exported only {condition}")
    return SeriesGap(name, (), "no such series on this server, and no known replacement")


# ---- the metrics suite's cases ------------------------------------------------


def expected_metric_families(ctx: CaseContext) -> list[ExpectedFamily]:
    """The families the server's version registers, those of an undeclared feature left out."""
    facts, expect = ctx.server, ctx.expect
    declared = set(expect.profile.data) if expect.profile is not None else set()
    return [
        ExpectedFamily(entry["name"], entry["type"], entry["since"], entry.get("when"))
        for entry in expect.fact("metric_families")
        if since(facts.parsed_version, entry["since"]) and entry.get("when", None) in (None, *declared)
    ]


def dashboard_series(ctx: CaseContext) -> list[Named]:
    return [Named(name) for name in ctx.expect.declared("metrics", "dashboard_names").value or ()]
