"""The contract catalogue and vLLM's behaviour by version, as data.

The data files are the single source: beside this module ``catalogue.yaml`` (the
releases the facts were read from, and the features in order); in each feature's
folder of the suites, ``suites/<feature>/contracts.yaml`` (a feature, its claim and
its contracts: the file a new contract goes in, beside its test); beside this module
again ``declarations.yaml`` (where a profile key left out
takes its value) and ``facts/<subsystem>.yaml`` with ``route_tables.yaml``
(what vLLM does, by version, grouped by the part of vLLM each was read from).
This module only puts them together and answers: which features and contracts exist (for which
versions, claimed under which conditions), where an undeclared profile key
takes its value, and what a given vLLM version does (a "fact").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from pytest_vllm_conformance.catalogue import yaml_data

CATALOGUE_FILE = "catalogue.yaml"  # the index: releases, and the features in the order reports list them
FEATURE_FILE = "contracts.yaml"  # suites/<feature>/contracts.yaml: the feature and its contracts
DECLARATIONS_FILE = "declarations.yaml"
FACTS_DIR = "facts"  # facts/<subsystem>.yaml: what vLLM does, by version
ROUTE_TABLES_FILE = "route_tables.yaml"
CONDITION_KINDS = frozenset({"declared", "given", "serves"})
COMPARISONS = ("is", "is_not", "is_set")


class UnknownContract(KeyError):
    pass


class NoFact(LookupError):
    pass


# A release tag in a fact's source: "at v0.32.0", or a run of releases "at v0.28.0-v0.31.0".
_TAG = re.compile(r"\bv(\d+)\.(\d+)\.\d+(?:\s*-\s*v(\d+)\.(\d+)\.\d+)?")


def series_read(source: str) -> frozenset[tuple[int, int]]:
    """The release series (major, minor) a fact's source was read at, as its tags name them."""
    series: set[tuple[int, int]] = set()
    for match in _TAG.finditer(source):
        first = (int(match[1]), int(match[2]))
        last = (int(match[3]), int(match[4])) if match[3] else first
        series.update((first, last))
        if first[0] == last[0]:
            series.update((first[0], minor) for minor in range(first[1], last[1]))
    return frozenset(series)


@dataclass(frozen=True)
class FactSource:
    """Where one version range of a fact was read, and what clients need that the range's releases do not do."""

    source: str
    read: frozenset[tuple[int, int]] = frozenset()
    departs_from: str = ""  # '' when the releases do what clients need

    @property
    def of_vllm(self) -> bool:
        """Read from vLLM's source; the plugin's own probe requests are not vLLM's to predict."""
        return not self.source.startswith("plugin:")

    def predicts(self, version: Version) -> bool:
        """Whether the range only predicts ``version``: a vLLM fact never read at its series or a newer one."""
        series = version.release[:2]
        return self.of_vllm and not any(read >= series for read in self.read)


@dataclass(frozen=True)
class Departure:
    """A release's known departure: what it does (the fact) is not what clients need (``needs``, in the words of
    the API or client that needs it)."""

    fact: str
    release: str  # "vLLM 0.32.0"
    needs: str
    source: str
    predicted: bool = False

    def __str__(self) -> str:
        read = "predicted from older releases' source" if self.predicted else self.source
        return f"a known departure of {self.release}: {self.needs} (fact {self.fact}: {read})"


class ReleaseNotCovered(NoFact):
    """The server's release is older than every release the facts were read from."""


@dataclass(frozen=True)
class Releases:
    """The vLLM releases the facts were read from (``releases`` in catalogue.yaml), oldest and newest series."""

    oldest: Version
    newest: Version

    @property
    def span(self) -> str:
        return f"vLLM {self.oldest} to {self.newest}"

    def is_older(self, version: Version) -> bool:
        return version < self.oldest

    def is_newer(self, version: Version) -> bool:
        return version.release[:2] > self.newest.release[:2]

    def refusal(self, version: Version) -> str:
        return (
            f"vLLM {version} is older than the contract catalogue, which covers {self.span} "
            f"(and newer releases by the newest facts): nothing is known of {version}'s contracts"
        )

    def judgement(self, reported: str | None, version: Version | None) -> str:
        """How the run judges the reported release, for the header and the report."""
        if version is None:
            return f"version unknown: judged by the newest facts ({self.newest}); the catalogue covers {self.span}"
        base = (
            str(version) if reported in (None, str(version)) else f"{reported}, judged as {version} (its base release)"
        )
        if self.is_newer(version):
            return (
                f"{base}: newer than the catalogue ({self.span}), so judged by the newest facts ({self.newest}), "
                f"which {version} may have changed"
            )
        return f"{base}: within the catalogue ({self.span})"


@dataclass(frozen=True)
class Condition:
    """One ``claimed_if`` condition: a declared profile value, an input the run was given, or what the server serves."""

    kind: str  # "declared", "given" or "serves"
    subject: str  # a profile key ("endpoint.scale_out"), an input name ("baseline") or a task ("generation")
    comparison: str = "is_set"
    value: Any = True

    def __str__(self) -> str:
        if self.kind == "given":
            return f"given {self.subject}"
        if self.kind == "serves":
            return f"the server serves {self.subject}"
        if self.comparison == "is_set":
            return f"{self.subject} is declared"
        word = "is" if self.comparison == "is" else "is not"
        return f"{self.subject} {word} {_show(self.value)}"


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Feature:
    name: str
    statement: str
    conditions: tuple[Condition, ...] = ()
    available: SpecifierSet | None = None
    unavailable: str = ""
    # Its checks need the server to themselves (run_lock): nothing else may talk to it meanwhile.
    exclusive: bool = False
    # Its checks stop the server (SIGTERM on one the plugin started): they run after every other test of the run.
    stops_server: bool = False
    # Where its checks are made when the run has an ingress: "ingress" (what callers get) or "server".
    judged_at: str = "server"
    # Inputs every one of its claimed contracts needs to be checked at all (applicability.NEEDS).
    needs: tuple[str, ...] = ()

    def has(self, version: Version | None) -> bool:
        return version is None or self.available is None or self.available.contains(version, prereleases=True)

    def missing_in(self, version: Version) -> str:
        return self.unavailable.format(version=version)


# The documents a wire contract can be held to (contracts.schema.json's holds_to), as the docs name them.
HOLDS_TO = {
    "openai_api_reference": "OpenAI's API reference (its OpenAPI description)",
    "openresponses_spec": "the OpenResponses specification",
    "anthropic_messages_api": "Anthropic's Messages API reference",
}


@dataclass(frozen=True)
class Contract:
    id: str
    feature: str
    versions: SpecifierSet
    statement: str
    conditions: tuple[Condition, ...] = ()
    judged_at: str | None = None  # None: its feature's
    needs: tuple[str, ...] = ()  # besides its feature's
    # The published document a wire contract holds the server to (HOLDS_TO), so a
    # reader knows whose shape a failure is measured against.
    holds_to: str | None = None
    # The fact that marks the releases departing from what the contract says clients need (Departure).
    departs_on: str | None = None

    def applies_to(self, version: Version | None) -> bool:
        # An unknown version claims nothing it cannot be held to: the suites
        # still run, and the version-specific facts then say what is unknown.
        return version is None or self.versions.contains(version, prereleases=True)


@dataclass(frozen=True)
class Declaration:
    """Where a profile key takes its value when the profile leaves it out."""

    key: str
    fact: str | None = None
    policy: Any = None
    has_policy: bool = False
    from_baseline: bool = False
    why: str = ""


@dataclass(frozen=True)
class Catalogue:
    features: dict[str, Feature]
    contracts: dict[str, Contract]
    facts: dict[str, list[tuple[SpecifierSet, Any]]]
    releases: Releases
    declarations: dict[str, Declaration] = field(default_factory=dict)
    # Each fact range's FactSource, in the order of ``facts`` (none for the route tables).
    sources: dict[str, list[FactSource]] = field(default_factory=dict)

    def contract(self, contract_id: str) -> Contract:
        try:
            return self.contracts[contract_id]
        except KeyError:
            raise UnknownContract(f"contract {contract_id!r} is in no suites/*/{FEATURE_FILE}") from None

    def declaration(self, key: str) -> Declaration:
        try:
            return self.declarations[key]
        except KeyError:
            raise KeyError(f"profile key {key!r} has no entry in {DECLARATIONS_FILE}") from None

    def judged_at_ingress(self, contract: Contract) -> bool:
        return (contract.judged_at or self.features[contract.feature].judged_at) == "ingress"

    def needs(self, contract: Contract) -> tuple[str, ...]:
        return self.features[contract.feature].needs + contract.needs

    def conditions(self, contract: Contract) -> tuple[Condition, ...]:
        """The feature's conditions, then the contract's own: all must hold for it to be claimed."""
        return self.features[contract.feature].conditions + contract.conditions

    def fact(self, name: str, version: Version | None) -> Any:
        """What vLLM ``version`` does for ``name``; None version means 'newest known'."""
        try:
            ranges = self.facts[name]
        except KeyError:
            raise NoFact(f"no fact {name!r} in {FACTS_DIR}/*.yaml") from None
        if version is None:
            return ranges[-1][1]
        if self.releases.is_older(version):
            raise ReleaseNotCovered(self.releases.refusal(version))
        for specifier, value in ranges:
            if specifier.contains(version, prereleases=True):
                return value
        raise NoFact(f"fact {name!r} says nothing about vLLM {version}")

    def fact_source(self, name: str, version: Version | None) -> FactSource | None:
        """The source of the range of ``name`` that judges ``version`` (None for the route tables)."""
        sources = self.sources.get(name)
        if not sources:
            return None
        if version is None:
            return sources[-1]
        for (specifier, _), source in zip(self.facts[name], sources, strict=True):
            if specifier.contains(version, prereleases=True):
                return source
        return None

    def departure(self, name: str, version: Version | None) -> Departure | None:
        """The release's known departure on fact ``name``, or None where its releases do what clients need."""
        source = self.fact_source(name, version)
        if source is None or not source.departs_from:
            return None
        release = f"vLLM {version}" if version else "the newest vLLM known"
        predicted = version is not None and source.predicts(version)
        return Departure(name, release, source.departs_from, source.source, predicted)

    def predicted_facts(self, version: Version) -> tuple[list[str], int]:
        """The vLLM facts ``version`` is judged by that were not read at its release or a newer one, and of how many."""
        judged = {name: self.fact_source(name, version) for name in self.sources}
        of_vllm = {name: source for name, source in judged.items() if source is not None and source.of_vllm}
        return sorted(name for name, source in of_vllm.items() if source.predicts(version)), len(of_vllm)

    def judgement(self, reported: str | None, version: Version | None) -> str:
        """How the run judges the reported release, with the facts it only predicts named by count."""
        judged = self.releases.judgement(reported, version)
        if version is None or self.releases.is_newer(version):
            return judged
        predicted, count = self.predicted_facts(version)
        if not predicted:
            return judged
        series = ".".join(map(str, version.release[:2]))
        return (
            f"{judged}; {len(predicted)} of its {count} facts are predicted from older releases' source, "
            f"not read from {series}'s (the report lists them)"
        )

    def by_feature(self) -> dict[str, list[Contract]]:
        grouped: dict[str, list[Contract]] = {feature: [] for feature in self.features}
        for contract in self.contracts.values():
            grouped[contract.feature].append(contract)
        return grouped

    def statements(self) -> dict[str, str]:
        return {name: feature.statement for name, feature in self.features.items()}


def _conditions(raw: Any, where: str) -> tuple[Condition, ...]:
    if raw is None:
        return ()
    entries = raw if isinstance(raw, list) else [raw]
    conditions = []
    for entry in entries:
        kinds = sorted(CONDITION_KINDS.intersection(entry))
        if len(kinds) != 1:
            raise ValueError(f"{where}: a condition names one of {sorted(CONDITION_KINDS)}: {entry}")
        kind = kinds[0]
        if kind in ("given", "serves"):
            conditions.append(Condition(kind, entry[kind]))
            continue
        comparisons = [name for name in COMPARISONS if name in entry]
        if len(comparisons) != 1:
            raise ValueError(f"{where}: a declared condition has one of {COMPARISONS}: {entry}")
        conditions.append(Condition("declared", entry["declared"], comparisons[0], entry[comparisons[0]]))
    return tuple(conditions)


def _declaration(key: str, entry: dict[str, Any]) -> Declaration:
    return Declaration(
        key=key,
        fact=entry.get("fact"),
        policy=entry.get("policy"),
        has_policy="policy" in entry,
        from_baseline=bool(entry.get("baseline")),
        why=entry.get("why", ""),
    )


def _read(*parts: str) -> Any:
    return yaml_data.load_shipped(resources.files(__package__).joinpath(*parts).read_text())


def _yaml_files(folder: str) -> list[str]:
    return sorted(
        entry.name for entry in resources.files(__package__).joinpath(folder).iterdir() if entry.name.endswith(".yaml")
    )


def suites_folder() -> Path:
    """The suites: inside the package in a wheel (pyproject.toml's force-include puts them there), beside it in a
    checkout. Found by path, never by an import name: a checkout imports them as ``suites``, a wheel as
    ``pytest_vllm_conformance.suites``, and each suite reaches its own folder's modules by relative imports."""
    package = Path(__file__).resolve().parents[1]
    shipped = package / "suites"
    return shipped if shipped.is_dir() else package.parent / "suites"


def feature_folders() -> dict[str, Path]:
    """Each feature's folder of the suites, by feature name: the folders that hold a ``contracts.yaml``."""
    return {file.parent.name: file for file in sorted(suites_folder().glob(f"*/{FEATURE_FILE}"))}


@cache
def raw_catalogue() -> dict[str, Any]:
    """The catalogue's files as one document (what contracts.schema.json describes), the route tables aside.

    Each contract takes its ``feature`` from its file's name. Shared: read it, never change it.
    """
    index = _read(CATALOGUE_FILE)
    raw: dict[str, Any] = {"releases": index["releases"], "features": {}, "contracts": [], "facts": {}}
    raw["declarations"] = _read(DECLARATIONS_FILE)
    folders = feature_folders()
    unlisted = sorted(set(folders) - set(index["features"]))
    if unlisted:
        raise ValueError(f"{CATALOGUE_FILE}: features {unlisted} have a {FEATURE_FILE} but are not listed")
    missing = sorted(set(index["features"]) - set(folders))
    if missing:
        raise ValueError(f"{CATALOGUE_FILE}: features {missing} have no suites/<feature>/{FEATURE_FILE}")
    for name in index["features"]:
        where = f"suites/{name}/{FEATURE_FILE}"
        part = yaml_data.load_shipped(folders[name].read_text(encoding="utf-8"))
        raw["features"][name] = part["feature"]
        for entry in part["contracts"] or ():
            owner = entry["id"].split(".", 1)[0]
            if owner != name:
                raise ValueError(f"{where}: contract {entry['id']} belongs in suites/{owner}/{FEATURE_FILE}")
            raw["contracts"].append({**entry, "feature": name})
    found_in: dict[str, str] = {}
    for file in _yaml_files(FACTS_DIR):
        for name, ranges in _read(FACTS_DIR, file).items():
            if name in found_in:
                raise ValueError(f"{FACTS_DIR}/{file}: fact {name!r} is in {FACTS_DIR}/{found_in[name]} too")
            found_in[name] = file
            raw["facts"][name] = ranges
    return raw


@cache
def load() -> Catalogue:
    raw = raw_catalogue()
    # The route tables are facts too, kept in their own file for their size.
    route_tables = _read(ROUTE_TABLES_FILE)
    clash = sorted(set(route_tables) & set(raw["facts"]))
    if clash:
        raise ValueError(f"{ROUTE_TABLES_FILE}: facts {clash} are in {FACTS_DIR}/ too")
    raw = {**raw, "facts": {**raw["facts"], **route_tables}}
    features = {
        name: Feature(
            name=name,
            statement=entry["statement"],
            conditions=_conditions(entry.get("claimed_if"), f"feature {name}"),
            available=SpecifierSet(entry["available"]) if "available" in entry else None,
            unavailable=entry.get("unavailable", ""),
            exclusive=bool(entry.get("exclusive")),
            stops_server=bool(entry.get("stops_server")),
            judged_at=entry.get("judged_at", "server"),
            needs=tuple(entry.get("needs", ())),
        )
        for name, entry in raw["features"].items()
    }
    declarations = {key: _declaration(key, entry or {}) for key, entry in raw["declarations"].items()}
    contracts = {}
    for entry in raw["contracts"]:
        if entry["feature"] not in features:
            raise ValueError(f"contract {entry['id']} names unknown feature {entry['feature']!r}")
        if entry["id"] in contracts:
            raise ValueError(f"contract {entry['id']} is listed twice (suites/{entry['feature']}/{FEATURE_FILE})")
        contracts[entry["id"]] = Contract(
            id=entry["id"],
            feature=entry["feature"],
            versions=SpecifierSet(entry["versions"]),
            statement=entry["statement"],
            conditions=_conditions(entry.get("claimed_if"), f"contract {entry['id']}"),
            judged_at=entry.get("judged_at"),
            needs=tuple(entry.get("needs", ())),
            holds_to=entry.get("holds_to"),
            departs_on=entry.get("departs_on"),
        )
    facts = {
        name: [(SpecifierSet(item["versions"]), item["value"]) for item in ranges]
        for name, ranges in raw["facts"].items()
    }
    sources = {
        name: [FactSource(item["source"], series_read(item["source"]), item.get("departs_from", "")) for item in ranges]
        for name, ranges in raw["facts"].items()
        if name not in route_tables
    }
    releases = Releases(Version(raw["releases"]["oldest"]), Version(raw["releases"]["newest"]))
    return Catalogue(
        features=features,
        contracts=contracts,
        facts=facts,
        releases=releases,
        declarations=declarations,
        sources=sources,
    )


def render_catalogue(catalogue: Catalogue) -> str:
    lines = []
    for name, contracts in catalogue.by_feature().items():
        feature = catalogue.features[name]
        lines.append(f"{name}: {feature.statement}")
        if feature.conditions:
            lines.append(f"  (claimed when {' and '.join(map(str, feature.conditions))})")
        if feature.available is not None:
            lines.append(f"  (vLLM {feature.available} has it)")
        for contract in contracts:
            when = f"  claimed when {' and '.join(map(str, contract.conditions))}." if contract.conditions else ""
            lines.append(f"  {contract.id}  [vLLM {contract.versions}]  {contract.statement}{when}")
    return "\n".join(lines)
