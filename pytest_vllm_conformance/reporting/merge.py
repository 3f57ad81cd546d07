"""Shards' reports into the one report a single run would give.

``vllm-conformance merge REPORT... -o OUT [--junit-out J --junit J...]``
(the command is ``plugin/cli.py``, which hands in the fleet's comparison): shards run on
other machines (a CI matrix, a Kubernetes indexed Job), each with its own
``--vllm-report``, are merged here. The merged report is rebuilt from each
report's ``tests`` list (every contract test and how it ended) by the same
code that builds a run's report, so per-feature verdicts, "N of M checked",
the counts and the listings are those of one run over the union of the tests.

Refused, naming the file, in one line: a report that is not ours or whose
counts do not add up to its tests, shards of different plugin versions,
serving profiles (name or content) or gates, a shard set with a shard missing
or given twice (``shard_set.py``), and one test ending differently in two
shards. The same test ending the same way in two shards counts once.

Shards of different targets (one shard per replica) keep each test apart:
its id is prefixed with its target's URL, and the report lists the targets.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.connection import user_files
from pytest_vllm_conformance.reporting import junit_merge, report_files, shard_set
from pytest_vllm_conformance.reporting.junit_merge import MergeRefused
from pytest_vllm_conformance.reporting.outcomes import (
    FAILURE,
    OUTCOMES,
    PARTIAL,
    ContractTest,
    feature_results,
    nothing_judged,
)
from pytest_vllm_conformance.reporting.redaction import Redactor
from pytest_vllm_conformance.reporting.shard_set import JudgeFleet, Shard

__all__ = ["MergeRefused", "Shard", "load", "main", "merge"]

# What every shard must share: one plugin judging one declared profile.
_SAME = (
    ("plugin version", ("plugin", "version")),
    ("serving profile", ("target", "profile")),
    ("serving profile's content", ("target", "profile_sha256")),
    ("gate", ("gate",)),
    # --vllm-shard-run, or the CI's run id: shard 2/2 of another run minutes later is not this run's.
    ("run", ("shard", "run")),
)
# The target fields that name the server a shard ran against.
_TARGET_IDENTITY = ("url", "vllm_version", "model", "server")


def load(path: Path) -> Shard:
    try:
        report = user_files.load_yaml(path, str(path))
    except user_files.UserFileError as exc:
        raise MergeRefused(f"{exc} (a report written by --vllm-report)") from None
    if not isinstance(report, dict) or report.get("kind") != report_files.REPORT_KIND:
        raise MergeRefused(f"{path}: not a {report_files.REPORT_KIND} (written by --vllm-report)")
    if report.get("apiVersion") != report_files.REPORT_API_VERSION:
        version = report.get("apiVersion")
        raise MergeRefused(f"{path}: apiVersion {version!r}, this plugin merges {report_files.REPORT_API_VERSION}")
    if not isinstance(report.get("tests"), list):
        raise MergeRefused(f"{path}: has no tests list (written by a plugin version before merging was possible)")
    problem = _malformed(report)
    if problem:
        raise MergeRefused(f"{path}: {problem}; rerun the shard (or use the file as it was written)")
    return Shard(path, report)


def _malformed(report: dict[str, Any]) -> str | None:
    """What makes a report unusable for a merge: a field of the wrong shape, or tests that do not add up."""
    for key in ("plugin", "target", "counts", "features"):
        if not isinstance(report.get(key), dict):
            return f"its {key} is not a mapping"
    if not isinstance(report["plugin"].get("version"), str):
        return "its plugin version is missing"
    try:
        aware = datetime.fromisoformat(str(report.get("date"))).tzinfo is not None
    except ValueError:
        aware = False
    if not aware:  # a run writes its start in UTC; a date without a zone cannot be ordered with the others'
        return f"its date {str(report.get('date'))[:40]!r} is not a date with a time zone"
    if not all(isinstance(feature, dict) for feature in report["features"].values()):
        return "a feature of it is not a mapping"
    if not isinstance(report.get("selection", {}), dict):
        return "its selection is not a mapping"
    if not isinstance(report["target"].get("routes_not_mounted", []), list):
        return "its target.routes_not_mounted is not a list"
    if report.get("exit_status") is not None and type(report.get("exit_status")) is not int:
        return f"its exit_status {str(report.get('exit_status'))[:40]!r} is not a number"
    tally = dict.fromkeys(OUTCOMES, 0)
    for index, entry in enumerate(report["tests"]):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(key), str) for key in _ENTRY_KEYS):
            return f"tests.{index} lacks one of {', '.join(_ENTRY_KEYS)}"
        if entry["outcome"] not in tally:
            return f"tests.{index} ended {entry['outcome'][:40]!r}, not one of {', '.join(OUTCOMES)}"
        tally[entry["outcome"]] += 1
    for outcome, listed in tally.items():
        # A report from before an outcome existed lists none of it, and counts none.
        counted = report["counts"].get(outcome.replace(" ", "_"), 0 if not listed else None)
        if counted != listed:
            return f"its counts say {counted!r} {outcome}, its tests list {listed}: the file was cut short or edited"
    shard = report.get("shard")
    if shard is not None and not _declared(shard):
        return "its shard section is neither an index and total nor a replica and its replicas"
    return None


_ENTRY_KEYS = ("test", "contract", "feature", "outcome")


def _declared(shard: Any) -> bool:
    if not isinstance(shard, dict):
        return False
    index, total = shard.get("index"), shard.get("total")
    # As --vllm-shard allows: 1 <= I <= N <= 10,000 (a total of 10^9 would be a billion shards to look for).
    by_index = isinstance(index, int) and isinstance(total, int) and 1 <= index <= total <= 10_000
    replicas = shard.get("replicas")
    by_replica = isinstance(replicas, list) and shard.get("replica") in replicas
    return by_index or by_replica


def _value(report: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        report = report.get(key) or {} if isinstance(report, dict) else {}
    return report or None


def merge(shards: Sequence[Shard], compare: JudgeFleet | None = None) -> dict[str, Any]:
    if not shards:
        raise MergeRefused("no report to merge")
    first = shards[0]
    for what, keys in _SAME:
        for shard in shards[1:]:
            if _value(shard.report, keys) != _value(first.report, keys):
                raise MergeRefused(
                    f"{shard.path}: {what} {_value(shard.report, keys)!r} differs from "
                    f"{_value(first.report, keys)!r} in {first.path}; shards of one run share both"
                )
    shard_set.check(shards)
    targets = _targets(shards)
    several = len(targets) > 1
    stopped = [shard for shard in shards if shard.error]
    if stopped and not several:
        raise MergeRefused(f"{stopped[0].path}: the shard stopped before any test: {stopped[0].error}")
    tests: dict[str, tuple[ContractTest, Path]] = {}
    for shard in shards:
        for entry in shard.report["tests"]:
            test = _contract_test(entry)
            if several:
                test.test_id = f"{shard.url} {test.test_id}"
            seen = tests.get(test.test_id)
            if seen is None:
                tests[test.test_id] = (test, shard.path)
            elif seen[0].outcome != test.outcome:
                raise MergeRefused(
                    f"{shard.path}: {test.test_id} {test.outcome}, but {seen[1]} has it {seen[0].outcome}; "
                    "a test must end one way in one merged run"
                )
    statements: dict[str, str] = {}
    for shard in shards:
        for name, feature in shard.report.get("features", {}).items():
            statements.setdefault(name, str(feature.get("description") or ""))
    merged_tests = [test for test, _ in tests.values()]
    if several:
        merged_tests += shard_set.replica_tests(shards, compare)
    results = feature_results(statements, merged_tests)
    merged = report_files.build(_run_info(shards), results, Redactor())
    if several:
        merged["targets"] = targets
    # The merged verdict decides, as the reporter decides one run's: a failed feature (a replica not reached, or
    # not agreeing, included), a strict gate's partial feature, a run that judged nothing.
    fails = (
        merged["result"] == FAILURE
        or bool(nothing_judged(results))
        or (merged.get("gate") == "strict" and any(result.result == PARTIAL for result in results))
    )
    merged["exit_status"] = _exit_status(
        [shard.report.get("exit_status") for shard in shards if not shard.error], fails
    )
    if merged["exit_status"] == report_files.INTERRUPTED_EXIT_STATUS:
        merged["result"] = report_files.INTERRUPTED  # a shard cut short: its verdicts cover part of its tests
    merged["shards"] = [_shard_line(shard) for shard in shards]
    return merged


def _contract_test(entry: dict[str, Any]) -> ContractTest:
    test = ContractTest(str(entry["test"]), str(entry["contract"]), str(entry["feature"]), str(entry["outcome"]))
    test.reason = str(entry.get("reason", ""))
    test.figures = str(entry.get("figures", ""))
    test.evidence = str(entry.get("evidence", ""))
    test.at_ingress = entry.get("judged_at") == "ingress"
    test.hidden = str(entry.get("ingress_hidden", ""))
    test.picture = str(entry.get("picture", ""))
    return test


def _targets(shards: Sequence[Shard]) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for shard in shards:
        target = {key: shard.report["target"].get(key) for key in _TARGET_IDENTITY}
        if target not in seen:
            seen.append(target)
    return seen


def _run_info(shards: Sequence[Shard]) -> report_files.RunInfo:
    first = shards[0].report
    target = first["target"]
    several = len(_targets(shards)) > 1
    run = report_files.RunInfo(
        started=min(datetime.fromisoformat(str(shard.report["date"])) for shard in shards),
        plugin_version=first["plugin"]["version"],
        url=None if several else target.get("url"),
        vllm_version=_agreed(shards, "vllm_version"),
        release=_agreed(shards, "release"),
        model=_agreed(shards, "model"),
        embedded_server=target.get("server") == "embedded",
        profile_name=target.get("profile"),
        profile_path=target.get("profile_file"),
        profile_sha256=target.get("profile_sha256"),  # the same in every shard (checked above)
        expectations=first.get("expectations"),
        exit_status=None,  # the merged verdict's (merge)
        gate=first.get("gate", "report"),
        routes=_agreed(shards, "routes"),
    )
    selections = [shard.report.get("selection", {}) for shard in shards]
    if all(selection == selections[0] for selection in selections):
        run.selection = dict(selections[0])
    mounted = [shard.report["target"].get("routes_not_mounted", []) for shard in shards]
    if all(routes == mounted[0] for routes in mounted):
        run.routes_not_mounted = list(mounted[0])
    predicted = [shard.report["target"].get("predicted_facts", []) for shard in shards]
    if all(facts == predicted[0] for facts in predicted):
        run.predicted_facts = list(predicted[0])
    return run


def _agreed(shards: Sequence[Shard], key: str) -> Any:
    values = {str(shard.report["target"].get(key)) for shard in shards}
    return shards[0].report["target"].get(key) if len(values) == 1 else None


def _exit_status(statuses: list[Any], fails: bool) -> int | None:
    """As one run ends: interrupted if any shard was (its verdicts cover part of its tests), else 1 when the merged
    verdict fails the run, else the worst status a shard ended with for another reason (5 = none ran tests). A
    shard's 1 is its own verdict's, which the merged one replaces: a shard that claimed nothing (exit 1) beside one
    that passed is a merged run that passed."""
    known = [int(status) for status in statuses if status is not None]
    if not known:
        return None
    if report_files.INTERRUPTED_EXIT_STATUS in known:
        return report_files.INTERRUPTED_EXIT_STATUS
    if fails:
        return 1
    other = [status for status in known if status not in (0, 1, 5)]
    if other:
        return max(other)
    return 5 if all(status == 5 for status in known) else 0


def _shard_line(shard: Shard) -> dict[str, Any]:
    line = {"file": shard.path.name, "date": shard.report.get("date"), "tests": len(shard.report["tests"])}
    if shard.report.get("shard"):
        line["shard"] = {key: value for key, value in shard.report["shard"].items() if key != "fleet"}
    if shard.error:
        line["error"] = shard.error
    if shard.report.get("selection"):
        line["selection"] = shard.report["selection"]
    return line


# ---- the command ----------------------------------------------------------------------


def _check_outputs(args: argparse.Namespace) -> None:
    """Before anything is read: each output can be written, and none is one of the inputs (``-o a.yaml`` given
    a.yaml to merge would overwrite a shard without a word)."""
    outputs = {"-o": args.output}
    if report_files.is_file_or_new(args.output):
        outputs["-o (its Markdown twin)"] = report_files.markdown_path(args.output)
    if args.junit_out is not None:
        outputs["--junit-out"] = args.junit_out
    for flag, output in outputs.items():
        problem = report_files.output_problem(output)
        if problem is not None:
            raise MergeRefused(f"{flag} {report_files.shown(output)}: {problem}")
        for given in [*args.reports, *args.junit]:
            if report_files.same_file(output, given):
                raise MergeRefused(
                    f"{flag} {report_files.shown(output)} is also one of the inputs ({report_files.shown(given)}): "
                    "give the merge another path"
                )
    if args.junit_out is not None and report_files.same_file(args.junit_out, args.output):
        raise MergeRefused(f"--junit-out {args.junit_out} is also -o: give each its own path")


def main(argv: list[str] | None = None, compare: JudgeFleet | None = None) -> int:
    """The command; ``compare`` judges replicas' observations (the plugin's command hands in the fleet's)."""
    parser = argparse.ArgumentParser(
        prog="vllm-conformance merge",
        description="Merge the --vllm-report files of shards into the report one run would give. Shards that "
        "declare their set (--vllm-shard=I/N, --vllm-shard-replicas) must all be given, each once; shards of "
        "different replicas are compared as a fleet. Exits 1 when the merged run failed, 2 when refused.",
    )
    parser.add_argument("reports", nargs="+", type=Path, help="the shards' YAML reports")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the merged YAML (its .md twin beside it)")
    parser.add_argument("--junit", type=Path, action="append", default=[], help="a shard's JUnit file (repeat)")
    parser.add_argument("--junit-out", type=Path, help="the merged JUnit file (with --junit)")
    args = parser.parse_args(argv)
    if bool(args.junit) != bool(args.junit_out):
        parser.error("--junit and --junit-out go together")
    try:
        _check_outputs(args)
        merged = merge([load(path) for path in args.reports], compare)
        if args.junit:
            junit_merge.merge_files(args.junit, args.junit_out)
        yaml_path, md_path = report_files.write(args.output, merged)
    except MergeRefused as exc:
        print(f"vllm-conformance merge: refused: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = report_files.shown(Path(exc.filename or args.output))
        print(f"vllm-conformance merge: refused: cannot write {where}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    counts = merged["counts"]
    where = f"{yaml_path} and {md_path}" if md_path else str(yaml_path)
    print(f"merged {len(args.reports)} report(s): {merged['result']}, {counts} -> {where}")
    # The exit status the one run would have had (its shards' worst), so a pipeline gates on the merge.
    return int(merged["exit_status"] or 0)
