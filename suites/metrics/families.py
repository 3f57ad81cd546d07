"""The metrics suite's cases: the families a version registers and the series dashboards query.

The page is read by the protocol floor's reader (``protocol/prometheus.py``,
on prometheus_client's own parser). A family is what vLLM registers
(``vllm:num_preemptions``, a counter); a series is what a dashboard queries
(``vllm:num_preemptions_total``): the parser gives both, and the two checks
use the one that matters to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pytest_vllm_conformance.catalogue.cases import CaseContext, Named, since
from pytest_vllm_conformance.protocol.prometheus import SERIES_SUFFIXES, Exposition


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
