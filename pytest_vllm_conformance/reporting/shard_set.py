"""The set of shards a merge is given: whole, each shard once, and its replicas compared.

A shard declares its set when it runs: ``--vllm-shard=I/N`` (shard I of N) or
``--vllm-shard-replicas=URL...`` (the shard of its own URL among these
replicas). The merge refuses a set with a shard missing or given twice, and
shards that declare different sets or none beside some that do. Shards that
declare nothing are merged as before, except that one file given twice is
refused.

Shards of different targets (one per replica) are also compared as the
in-process fleet compares its replicas (``suites/fleet/test_fleet.py``): a shard
stopped before any test (its replica unreachable) fails
``fleet.replicas_reached``, and every replica's observed serving profile is
judged for ``fleet.replicas_agree`` by the fleet's own decision (the
declared reference, the profile's declarations, else the majority; a tie
undecided), which the command hands in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pytest_vllm_conformance.reporting.junit_merge import MergeRefused
from pytest_vllm_conformance.reporting.outcomes import FAILED, PASSED, ContractTest


@dataclass
class Shard:
    path: Path
    report: dict[str, Any]

    @property
    def error(self) -> str | None:
        """The usage error that stopped the shard before any test (an unreachable replica), if one did."""
        error = self.report.get("error")
        return str(error) if error else None

    @property
    def url(self) -> Any:
        return self.report["target"].get("url")


# The fleet's judgement (observed/replicas.py, handed in by the command) of replicas' observations (None: not
# observed), by the rules their shards recorded:
# each replica's outcome (passed, failed or undecided) and why.
JudgeFleet = Callable[[dict[str, dict[str, Any] | None], dict[str, Any]], dict[str, tuple[str, str]]]


def check(shards: Sequence[Shard]) -> None:
    declared = [shard for shard in shards if shard.report.get("shard")]
    if not declared:
        _no_file_twice(shards)
        return
    undeclared = [shard for shard in shards if not shard.report.get("shard")]
    if undeclared:
        raise MergeRefused(
            f"{undeclared[0].path}: declares no shard set, but {declared[0].path} does; run every shard with the "
            "same --vllm-shard=I/N total or --vllm-shard-replicas"
        )
    first = declared[0].report["shard"]
    if "index" in first:
        _whole(
            shards,
            "total",
            lambda shard: shard.report["shard"].get("total"),
            _index,
            list(range(1, first["total"] + 1)),
        )
    else:
        _whole(shards, "replicas", lambda shard: shard.report["shard"].get("replicas"), _replica, first["replicas"])


def _index(shard: Shard) -> Any:
    return shard.report["shard"].get("index")


def _replica(shard: Shard) -> Any:
    return shard.report["shard"].get("replica")


def _whole(
    shards: Sequence[Shard],
    what: str,
    set_of: Callable[[Shard], Any],
    member: Callable[[Shard], Any],
    expected: list[Any],
) -> None:
    first = shards[0]
    seen: dict[Any, Shard] = {}
    for shard in shards:
        if set_of(shard) != set_of(first):
            raise MergeRefused(
                f"{shard.path}: shard set {what} {set_of(shard)!r} differs from {set_of(first)!r} in {first.path}; "
                "shards of one run declare one set"
            )
        name = member(shard)
        if name in seen:
            raise MergeRefused(f"{shard.path}: shard {name} is given twice (also {seen[name].path}); give each once")
        seen[name] = shard
    missing = [str(name) for name in expected if name not in seen]
    if missing:
        total = f" of {len(expected)}" if what == "total" else ""
        raise MergeRefused(
            f"shard(s) {', '.join(missing)}{total} missing (given: {', '.join(str(s.path) for s in shards)}); a "
            "shard that did not run leaves the merged run incomplete"
        )


def _no_file_twice(shards: Sequence[Shard]) -> None:
    seen: dict[tuple[Any, ...], Shard] = {}
    for shard in shards:
        report = shard.report
        key = (report.get("date"), shard.url, str(report.get("selection")), str(report.get("tests")))
        if key in seen:
            raise MergeRefused(f"{shard.path}: the same shard as {seen[key].path}; give each shard once")
        seen[key] = shard


def replica_tests(shards: Sequence[Shard], compare: JudgeFleet | None) -> list[ContractTest]:
    """The fleet's own verdicts over shards of different replicas: each reached, and each judged as the fleet
    judges its replicas in one run (``compare``: observed/replicas.py's decision, handed in by the command)."""
    by_url: dict[str, Shard] = {}
    for shard in shards:
        by_url.setdefault(str(shard.url), shard)
    stopped = [f"replica {url}: {shard.error}" for url, shard in by_url.items() if shard.error]
    reached = ContractTest("merge::test_replicas_reached", "fleet.replicas_reached", "fleet", PASSED)
    if stopped:
        reached.outcome, reached.reason = FAILED, "replica(s) not reached:\n" + "\n".join(stopped)
    tests = [reached]
    if compare is None:
        return tests
    rules = dict(shards[0].report.get("shard", {}).get("fleet") or {})
    if rules.get("reference") is not None:
        rules["reference"] = _reference(list(by_url), rules["reference"])
    observed = {url: shard.report["target"].get("observed") or None for url, shard in by_url.items()}
    judged = compare(observed, rules)
    for url in by_url:
        outcome, reason = judged[url]
        if observed[url] is None and not by_url[url].error:
            reason += " (a shard run without --vllm-shard or --vllm-shard-replicas records no observation)"
        tests.append(
            ContractTest(f"merge::test_replicas_agree[{url}]", "fleet.replicas_agree", "fleet", outcome, reason)
        )
    return tests


def _reference(urls: list[str], declared: Any) -> str:
    """The profile's fleet.reference (a replica's URL or host:port), else the first replica."""
    for url in urls:
        parts = urlsplit(url)
        if declared in (url, f"{parts.hostname}:{parts.port}"):
            return url
    return urls[0]
