"""The contract catalogue and vLLM's behaviour by version, as data.

``contracts.yaml`` beside this file is the single source; this module only
loads it and answers two questions: which contracts exist (and for which
versions), and what a given vLLM version does (a "fact").
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from . import yaml_data

CATALOGUE_FILE = "contracts.yaml"


class UnknownContract(KeyError):
    pass


class NoFact(LookupError):
    pass


@dataclass(frozen=True)
class Contract:
    id: str
    feature: str
    versions: SpecifierSet
    statement: str

    def applies_to(self, version: Version | None) -> bool:
        # An unknown version claims nothing it cannot be held to: the suites
        # still run, and the version-specific facts then say what is unknown.
        return version is None or self.versions.contains(version, prereleases=True)


@dataclass(frozen=True)
class Catalogue:
    features: dict[str, str]
    contracts: dict[str, Contract]
    facts: dict[str, list[tuple[SpecifierSet, Any]]]

    def contract(self, contract_id: str) -> Contract:
        try:
            return self.contracts[contract_id]
        except KeyError:
            raise UnknownContract(f"contract {contract_id!r} is not in the catalogue ({CATALOGUE_FILE})") from None

    def fact(self, name: str, version: Version | None) -> Any:
        """What vLLM ``version`` does for ``name``; None version means 'newest known'."""
        try:
            ranges = self.facts[name]
        except KeyError:
            raise NoFact(f"no fact {name!r} in {CATALOGUE_FILE}") from None
        if version is None:
            return ranges[-1][1]
        for specifier, value in ranges:
            if specifier.contains(version, prereleases=True):
                return value
        raise NoFact(f"{CATALOGUE_FILE} says nothing about {name!r} for vLLM {version}")

    def by_feature(self) -> dict[str, list[Contract]]:
        grouped: dict[str, list[Contract]] = {feature: [] for feature in self.features}
        for contract in self.contracts.values():
            grouped[contract.feature].append(contract)
        return grouped


@cache
def load() -> Catalogue:
    raw = yaml_data.load_shipped(resources.files(__package__).joinpath(CATALOGUE_FILE).read_text())
    features = dict(raw["features"])
    contracts = {}
    for entry in raw["contracts"]:
        if entry["feature"] not in features:
            raise ValueError(f"{CATALOGUE_FILE}: contract {entry['id']} names unknown feature {entry['feature']!r}")
        if entry["id"] in contracts:
            raise ValueError(f"{CATALOGUE_FILE}: contract {entry['id']} is listed twice")
        contracts[entry["id"]] = Contract(
            id=entry["id"],
            feature=entry["feature"],
            versions=SpecifierSet(entry["versions"]),
            statement=entry["statement"],
        )
    facts = {
        name: [(SpecifierSet(item["versions"]), item["value"]) for item in ranges]
        for name, ranges in raw["facts"].items()
    }
    return Catalogue(features=features, contracts=contracts, facts=facts)


def render_catalogue(catalogue: Catalogue) -> str:
    lines = []
    for feature, contracts in catalogue.by_feature().items():
        lines.append(f"{feature}: {catalogue.features[feature]}")
        for contract in contracts:
            lines.append(f"  {contract.id}  [vLLM {contract.versions}]  {contract.statement}")
    return "\n".join(lines)
