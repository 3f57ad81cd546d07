"""What the replicas of a fleet must agree on, by their captured serving profiles.

Each replica is observed once at session start (``profile_diff/capture.py``);
each one other than the reference (the profile's ``fleet.reference``, else
the first replica) is compared with the reference by the profile diff
(``profile_diff/diff.py``). Replicas of one release must agree on every
aspect: a difference of any kind (a route or metric name more, another
generation default) is a skewed replica. A declared rolling upgrade
(``fleet.allowed_versions: [old, new]``) allows a replica on the other
allowed version, compared then on what matters for serving only; any
version outside the list fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext, Named, NoCases
from pytest_vllm_conformance.features.profile_diff.diff import Difference, differences


@dataclass(frozen=True)
class Member:
    name: str
    observed: Mapping[str, Any] | None
    problem: str | None = None


@dataclass(frozen=True)
class Fleet:
    members: tuple[Member, ...]

    def member(self, name: str) -> Member:
        return next(member for member in self.members if member.name == name)


def reference_name(replicas: tuple[str, ...], declared: str | None) -> str:
    if not replicas:
        raise NoCases("the run has one target: there is no fleet to compare")
    if declared is None:
        return replicas[0]
    if declared not in replicas:
        raise NoCases(f"fleet.reference names {declared!r}, which is not a replica of this run ({', '.join(replicas)})")
    return declared


def fleet_replicas(ctx: CaseContext) -> list[Named]:
    """Each replica other than the reference, by name."""
    reference = reference_name(ctx.replicas, ctx.expect.declared("fleet", "reference").value)
    return [Named(name) for name in ctx.replicas if name != reference]


def version_allowed(version: str | None, allowed: Iterable[str]) -> bool:
    """``0.32.0`` is allowed by ``0.32.0``, and ``0.32.0+cpu`` by ``0.32.0`` or ``0.32``."""
    if version is None:
        return False
    return any(version == entry or version.startswith((f"{entry}.", f"{entry}+")) for entry in allowed)


def skew(
    reference: Mapping[str, Any], replica: Mapping[str, Any], allowed_versions: list[str] | None, ignore: Iterable[str]
) -> list[Difference]:
    """What sets ``replica`` apart from ``reference``: the differences that fail it (empty: they agree)."""
    found = differences(reference, replica, ignore)
    if not allowed_versions:
        return found
    upgrade = reference.get("vllm_version") != replica.get("vllm_version")
    failing = []
    for difference in found:
        if difference.aspect == "vllm_version" or (upgrade and not difference.matters):
            continue  # the versions are checked against the list below; an upgrade may add routes, metrics
        failing.append(difference)
    return failing


def disallowed_versions(fleet: Fleet, allowed_versions: list[str] | None, names: Iterable[str]) -> list[str]:
    """``name: version`` of each named replica on a version the declared rolling upgrade does not allow."""
    if not allowed_versions:
        return []
    out = []
    for name in names:
        observed = fleet.member(name).observed or {}
        version = observed.get("vllm_version")
        if not version_allowed(version, allowed_versions):
            out.append(f"{name}: {version or 'unknown'}")
    return out


def side_by_side(reference: str, replica: str, found: list[Difference]) -> str:
    """One line per difference: the aspect, the reference's value and the replica's."""
    lines = [f"replica {replica} differs from {reference} in {len(found)} aspect(s):"]
    for difference in found:
        lines.append(f"  {difference.id}: {reference}={difference.before!r} {replica}={difference.after!r}")
    return "\n".join(lines)
