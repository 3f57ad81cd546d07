"""What the replicas of a fleet must agree on, by their captured serving profiles, and who is the odd one out.

Each replica is observed once at session start (``observed/capture.py``)
and compared with the others by the profile diff (``observed/diff.py``).
Replicas of one release must agree on every aspect: a difference of any
kind (a route or metric name more, another generation default) sets a
replica apart. A declared rolling upgrade (``fleet.allowed_versions:
[old, new]``) allows a replica on the other allowed version, compared then,
older to newer, on what matters for serving only; any version outside the
list fails.

Which side of a split is wrong is decided, never assumed from the order of
the URLs: by the declared reference (``fleet.reference``) when there is one;
else by what the profile itself declares (``context.max_model_len``,
``endpoint.auth``, ``endpoint.scale_out``, ``fleet.allowed_versions``: a
replica that contradicts it is wrong whatever the others run); else by
majority among the replicas the profile does not contradict. The replicas
outside the chosen group are the odd ones out, each named with its values
beside the group's. A tie (one against one, two against two) still fails
every tied replica: that the replicas differ is certain, and a fleet that
serves two ways is not one deployment; only which side is wrong is not
known, and the message says so (declare fleet.reference, or the value).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from pytest_vllm_conformance.catalogue.cases import CaseContext, Named, NoCases
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.observed.diff import Difference, differences

AGREES = "agrees"
ODD = "odd one out"
# A tie: the replicas certainly differ, and nothing says which side is wrong. A failure of each tied replica.
SPLIT = "split"
UNDECIDED = "undecided"


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


@dataclass(frozen=True)
class Declared:
    """What the profile itself declares that a replica's observation shows (defaults and baselines aside)."""

    max_model_len: int | None = None
    auth: str | None = None
    scale_out: str | None = None
    allowed_versions: tuple[str, ...] = ()
    reference: str | None = None
    ignore: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Judgement:
    """One replica's verdict: it agrees with the side the fleet decided for, is the odd one out, or undecided."""

    replica: str
    outcome: str
    message: str
    compared: int  # the other replicas it was compared with


def reference_name(replicas: tuple[str, ...], declared: str | None) -> str:
    if not replicas:
        raise NoCases("the run has one target: there is no fleet to compare")
    if declared is None:
        return replicas[0]
    if declared not in replicas:
        raise NoCases(f"fleet.reference names {declared!r}, which is not a replica of this run ({', '.join(replicas)})")
    return declared


def fleet_replicas(ctx: CaseContext) -> list[Named]:
    """Every replica by name, the first and the declared reference included: any of them may be the skewed one."""
    reference_name(ctx.replicas, ctx.expect.declared("fleet", "reference").value)  # refuses an unknown reference
    return [Named(name) for name in ctx.replicas]


def declared_by(expect: Expectations) -> Declared:
    """The profile's own declarations a replica is held to (``expect``: the run's Expectations)."""

    def profile(section: str, key: str) -> Any:
        expectation = expect.declared(section, key)
        return expectation.value if expectation.from_profile else None

    return Declared(
        max_model_len=profile("context", "max_model_len"),
        auth=profile("endpoint", "auth"),
        scale_out=profile("endpoint", "scale_out"),
        allowed_versions=tuple(profile("fleet", "allowed_versions") or ()),
        reference=profile("fleet", "reference"),
        ignore=tuple(expect.declared("profile_diff", "ignore").value or ()),
    )


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


def side_by_side(reference: str, replica: str, found: list[Difference], before: str | None = None) -> str:
    """One line per difference: the aspect, the reference's value and the replica's.

    ``before``: the side the differences were taken from, when it is the
    replica's (an upgrade is compared from the older version to the newer).
    """
    lines = [f"replica {replica} differs from {reference} in {len(found)} aspect(s):"]
    old, new = (reference, replica) if before in (None, reference) else (replica, reference)
    for difference in found:
        lines.append(f"  {difference.id}: {old}={difference.before!r} {new}={difference.after!r}")
    return "\n".join(lines)


def contradictions(observed: Mapping[str, Any], declared: Declared) -> list[str]:
    """What in one replica's observation the profile's own declarations contradict."""
    found = []
    if declared.max_model_len is not None and observed.get("max_model_len") != declared.max_model_len:
        found.append(
            f"max_model_len {observed.get('max_model_len')}, the profile declares "
            f"context.max_model_len: {declared.max_model_len}"
        )
    auth = (observed.get("auth") or {}).get("posture")
    if declared.auth is not None and auth in ("required", "none") and auth != declared.auth:
        found.append(f"auth {auth}, the profile declares endpoint.auth: {declared.auth}")
    scale_out = (observed.get("scale_out") or {}).get("state")
    if declared.scale_out is not None and scale_out in ("enabled", "disabled") and scale_out != declared.scale_out:
        found.append(f"scale-out {scale_out}, the profile declares endpoint.scale_out: {declared.scale_out}")
    version = observed.get("vllm_version")
    if declared.allowed_versions and not version_allowed(version, declared.allowed_versions):
        found.append(f"vLLM {version or 'unknown'}, outside fleet.allowed_versions {list(declared.allowed_versions)}")
    return found


def _older(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    try:
        return Version(str(one.get("vllm_version"))) < Version(str(other.get("vllm_version")))
    except InvalidVersion:
        return False


def apart(one: Member, other: Member, declared: Declared) -> tuple[str, list[Difference]]:
    """The differences that set ``other`` apart from ``one``, and the side they were taken from.

    Under a declared upgrade they are taken from the older version to the
    newer, whichever replica is judged: the newer release may add routes,
    never remove one.
    """
    assert one.observed is not None and other.observed is not None
    allowed = list(declared.allowed_versions) or None
    before, after = one, other
    if allowed and _older(other.observed, one.observed):
        before, after = other, one
    assert before.observed is not None and after.observed is not None
    return before.name, skew(before.observed, after.observed, allowed, declared.ignore)


def _names(group: list[Member]) -> str:
    return ", ".join(member.name for member in group)


def decide(fleet: Fleet, declared: Declared) -> dict[str, Judgement]:
    """Each replica's judgement: the side the fleet decides for agrees, the others are the odd ones out."""
    seen = [member for member in fleet.members if member.observed is not None]
    judgements = {
        member.name: Judgement(member.name, ODD, f"replica {member.name} was not observed: {member.problem}", 0)
        for member in fleet.members
        if member.observed is None
    }
    groups: list[list[Member]] = []
    for member in seen:  # replicas that agree with one another, in the run's order
        group = next((group for group in groups if not apart(group[0], member, declared)[1]), None)
        if group is None:
            groups.append([member])
        else:
            group.append(member)
    contradicted = {member.name: contradictions(member.observed or {}, declared) for member in seen}
    right, basis, tied = _right_side(fleet, groups, contradicted, declared)
    for member in seen:
        judgements[member.name] = _judge(member, groups, contradicted[member.name], right, basis, tied, declared)
    return judgements


def _right_side(
    fleet: Fleet, groups: list[list[Member]], contradicted: dict[str, list[str]], declared: Declared
) -> tuple[list[Member] | None, str, list[list[Member]]]:
    """The group every replica is held to and why it was chosen, or None and the groups tied for it."""
    total = len(fleet.members)
    if declared.reference is not None:
        group = next((group for group in groups if declared.reference in {m.name for m in group}), None)
        if group is None:
            return None, f"the declared reference {declared.reference} (fleet.reference) was not observed", []
        return group, f"the declared reference {declared.reference} (fleet.reference)", []
    if len(groups) == 1:
        return groups[0], f"every replica ({len(groups[0])} of {total})", []
    candidates = [group for group in groups if not any(contradicted[member.name] for member in group)]
    if not candidates:
        return None, "every replica contradicts the profile", []
    if len(candidates) == 1:
        group = candidates[0]
        return group, f"{_names(group)}, the only replica(s) that serve what the profile declares", []
    largest = max(len(group) for group in candidates)
    tops = [group for group in candidates if len(group) == largest]
    if len(tops) == 1:
        return tops[0], f"the majority {_names(tops[0])} ({largest} of {total} replicas agree)", []
    return None, "", tops


def _judge(
    member: Member,
    groups: list[list[Member]],
    contradicted: list[str],
    right: list[Member] | None,
    basis: str,
    tied: list[list[Member]],
    declared: Declared,
) -> Judgement:
    compared = sum(len(group) for group in groups) - 1
    lines = []
    if contradicted:
        lines.append(f"replica {member.name} does not serve what the profile declares: {'; '.join(contradicted)}")
    if right is not None:
        if member in right:
            if not lines:
                return Judgement(member.name, AGREES, f"agrees with {basis}", compared)
        else:
            before, found = apart(right[0], member, declared)
            lines.append(f"replica {member.name} is the odd one out against {basis}")
            lines.append(side_by_side(right[0].name, member.name, found, before))
        return Judgement(member.name, ODD, "\n".join(lines), compared)
    if lines:
        return Judgement(member.name, ODD, "\n".join(lines), compared)
    if not tied:
        return Judgement(member.name, UNDECIDED, f"nothing to hold replica {member.name} to: {basis}", 0)
    other = next(group for group in tied if member not in group)
    before, found = apart(other[0], member, declared)
    against = " against ".join(f"{len(group)} ({_names(group)})" for group in tied)
    if any(member in group for group in tied):
        why = (
            f"the fleet splits {against}: its replicas serve differently, which fails the fleet whichever side is "
            "right; neither fleet.reference nor a value the profile declares says which side is wrong: declare "
            "fleet.reference, or the value they differ in"
        )
        shown = side_by_side(other[0].name, member.name, found, before)
        return Judgement(member.name, SPLIT, f"{why}\n{shown}", compared)
    lines.append(f"replica {member.name} is the odd one out: it agrees with no side of the split {against}")
    lines.append(side_by_side(other[0].name, member.name, found, before))
    return Judgement(member.name, ODD, "\n".join(lines), compared)
