"""The conformance report: one YAML file for machines, its Markdown twin for people.

Modelled on the Kubernetes Gateway API ConformanceReport: what was tested
(the implementation: vLLM version, model, URL, serving profile), against
which expectations, and per feature whether it was claimed and how it
fared, with every failed, departed, undecided and skipped contract named and what
each contract's passes judged. ``--vllm-report
PATH`` writes PATH (YAML) and PATH with the suffix ``.md`` beside it.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pytest_vllm_conformance.connection import user_files
from pytest_vllm_conformance.reporting.evidence import noun, plural
from pytest_vllm_conformance.reporting.outcomes import (
    FAILED,
    KNOWN_DEPARTURE,
    NOT_CLAIMED,
    OUTCOMES,
    PASSED,
    SKIPPED,
    UNDECIDED,
    ContractTest,
    FeatureResult,
    overall_result,
)
from pytest_vllm_conformance.reporting.redaction import Redactor

REPORT_KIND = "VllmConformanceReport"
REPORT_API_VERSION = "pytest-vllm-conformance/v1"


@dataclass
class RunInfo:
    """What the report says about the run besides the outcomes."""

    started: datetime
    plugin_version: str
    url: str | None = None
    vllm_version: str | None = None
    # How the release was judged: its base release, within the catalogue or by the newest facts.
    release: str | None = None
    # The facts the release is judged by that were not read from its own source (Catalogue.predicted_facts).
    predicted_facts: list[str] = field(default_factory=list)
    model: str | None = None
    embedded_server: bool = False
    profile_name: str | None = None
    profile_path: str | None = None
    expectations: str | None = None
    selection: dict[str, str] = field(default_factory=dict)
    exit_status: int | None = None
    gate: str = "report"
    # Where the route table the suites probed came from (discovery's RouteInventory.source).
    routes: str | None = None
    routes_not_mounted: list[str] = field(default_factory=list)
    # A fleet: one entry per replica (name, url, vllm_version, model, result, and problem when not reached).
    replicas: list[dict[str, Any]] = field(default_factory=list)
    # The profile's content, hashed: shards of one run judged the same declarations, not merely one name.
    profile_sha256: str | None = None
    # A shard: the set it belongs to (index and total, or its replica and all), for the merge to check whole.
    shard: dict[str, Any] | None = None
    # A shard: its target's observed serving profile and the fleet's rules, for the merge to compare replicas.
    observed: dict[str, Any] | None = None
    fleet_rules: dict[str, Any] = field(default_factory=dict)


def markdown_path(report_path: Path) -> Path:
    return report_path.with_suffix(".md")


def _key(outcome: str) -> str:
    return outcome.replace(" ", "_")


def build(run: RunInfo, features: list[FeatureResult], redactor: Redactor) -> dict[str, Any]:
    totals = {_key(outcome): sum(feature.counts[outcome] for feature in features) for outcome in OUTCOMES}
    report: dict[str, Any] = {
        "apiVersion": REPORT_API_VERSION,
        "kind": REPORT_KIND,
        "date": run.started.isoformat(timespec="seconds"),
        "plugin": {"name": "pytest-vllm-conformance", "version": run.plugin_version},
        "target": {
            "url": run.url,
            "vllm_version": run.vllm_version,
            "release": run.release,
            "model": run.model,
            "server": "embedded" if run.embedded_server else "given",
            "profile": run.profile_name,
            "profile_file": run.profile_path,
        },
        "expectations": run.expectations,
    }
    if run.profile_sha256:
        report["target"]["profile_sha256"] = run.profile_sha256
    if run.observed is not None:
        report["target"]["observed"] = run.observed
    if run.predicted_facts:
        report["target"]["predicted_facts"] = list(run.predicted_facts)
    if run.routes is not None:
        report["target"]["routes"] = run.routes
    if run.routes_not_mounted:
        report["target"]["routes_not_mounted"] = list(run.routes_not_mounted)
    if run.replicas:
        report["replicas"] = [dict(replica) for replica in run.replicas]
    if run.selection:
        report["selection"] = dict(run.selection)
    if run.shard is not None:
        report["shard"] = {**run.shard, **({"fleet": dict(run.fleet_rules)} if run.fleet_rules else {})}
    report["result"] = result_of(run, features)
    report["gate"] = run.gate
    report["exit_status"] = run.exit_status
    report["counts"] = totals
    report["features"] = {feature.name: _feature(feature) for feature in features}
    report["tests"] = test_entries(features)
    return _scrubbed(report, redactor)


# The result of a run stopped before any test by a usage error (exit 4): an input to fix, named in ``error``.
USAGE_ERROR = "usage error"
# The result of a run cut short (Ctrl-C, SIGTERM, pytest's "Interrupted": exit 2): its verdicts cover only the tests
# that ran, so no feature's "success" stands for the run.
INTERRUPTED = "interrupted"
INTERRUPTED_EXIT_STATUS = 2


def result_of(run: RunInfo, features: list[FeatureResult]) -> str:
    """The run's one word: ``interrupted`` for a run cut short, else the worst of its features'."""
    return INTERRUPTED if run.exit_status == INTERRUPTED_EXIT_STATUS else overall_result(features)


def refused(run: RunInfo, error: str, redactor: Redactor) -> dict[str, Any]:
    """The report of a run a usage error stopped: no test, the error as its verdict (a pipeline always has a file)."""
    report = build(run, [], redactor)
    report["result"] = USAGE_ERROR
    report["exit_status"] = int(run.exit_status) if run.exit_status is not None else 4
    report["error"] = redactor(error)
    return report


def test_entries(features: list[FeatureResult]) -> list[dict[str, Any]]:
    """Every contract test and how it ended, sorted by id: what ``reporting.merge`` rebuilds a report from.

    The feature sections above summarise; this list keeps each test (passed and
    not-claimed ones included) with what its verdict was made of, so that the
    reports of shards run apart merge into the report one run would give.
    """
    entries = []
    for feature in features:
        for test in feature.tests:
            entry: dict[str, Any] = {"test": test.test_id, "contract": test.contract, "feature": test.feature}
            entry["outcome"] = test.outcome
            for key, value in (
                ("reason", test.reason),
                ("figures", test.figures),
                ("evidence", test.evidence),
                ("judged_at", "ingress" if test.at_ingress else ""),
                ("ingress_hidden", test.hidden),
                ("picture", test.picture),
            ):
                if value:
                    entry[key] = value
            entries.append(entry)
    return sorted(entries, key=lambda entry: entry["test"])


def _feature(feature: FeatureResult) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "description": feature.statement,
        "claimed": feature.claimed,
        "result": feature.result,
        "checked": feature.coverage if feature.claimed else None,
        "counts": {_key(outcome): feature.counts[outcome] for outcome in OUTCOMES},
    }
    # Sorted, not in the order tests ended: the same run gives the same report,
    # serial or spread over pytest-xdist workers.
    listed = (FAILED, feature.failed), (KNOWN_DEPARTURE, feature.departed), (UNDECIDED, feature.undecided)
    for outcome, tests in (*listed, (SKIPPED, feature.skipped)):
        if tests:
            ordered = sorted(tests, key=lambda t: (t.contract, t.test_id))
            entry[_key(outcome)] = [
                {"contract": t.contract, "test": t.test_id, "reason": t.reason} | _replica(t) for t in ordered
            ]
    judged = evidence_by_contract(feature.tests)
    if judged:
        entry["evidence"] = judged
    if feature.measured:
        ordered = sorted(feature.measured, key=lambda t: (t.contract, t.test_id))
        entry["figures"] = [
            {"contract": t.contract, "test": t.test_id, "outcome": t.outcome, "figures": t.figures}
            | _replica(t)
            | ({"picture": t.picture} if t.picture else {})
            for t in ordered
        ]
    if feature.not_exposed:
        entry["not_exposed_by_ingress"] = {"tests": feature.not_exposed, "routes": sorted(feature.hidden)}
    if feature.problem:
        entry["problem"] = feature.problem
    if feature.not_claimed:
        entry[_key(NOT_CLAIMED)] = [
            {"contract": contract, "tests": count, "reason": reason}
            for contract, reason, count in sorted(feature.not_claimed_by_contract())
        ]
    return entry


def evidence_by_contract(tests: list[ContractTest]) -> list[dict[str, Any]]:
    """Each contract's passed tests and what they judged in all: "judged: 30 answers" over 30 tests."""
    totals: dict[str, dict[str, int]] = {}
    passed: dict[str, int] = {}
    for test in tests:
        if test.outcome != PASSED or not test.evidence:
            continue
        passed[test.contract] = passed.get(test.contract, 0) + 1
        counts = totals.setdefault(test.contract, {})
        for part in test.evidence.removeprefix("judged: ").split(", "):
            number, _, what = part.partition(" ")
            if number.isdigit():
                phrase = plural(what, int(number))
                counts[phrase] = counts.get(phrase, 0) + int(number)
    return [
        {
            "contract": contract,
            "passed": passed[contract],
            "judged": ", ".join(f"{count} {noun(what, count)}" for what, count in counts.items()),
        }
        for contract, counts in sorted(totals.items())
    ]


def _replica(test: ContractTest) -> dict[str, str]:
    return {"replica": test.replica} if test.replica else {}


def _scrubbed(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, str):
        return redactor(value)
    if isinstance(value, dict):
        return {key: _scrubbed(item, redactor) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrubbed(item, redactor) for item in value]
    return value


# ---- rendering ----------------------------------------------------------------------


def render_yaml(report: dict[str, Any]) -> str:
    header = "# vLLM conformance report (pytest-vllm-conformance); the Markdown twin has the same stem.\n"
    return header + user_files.dump_yaml(report, sort_keys=False, allow_unicode=True, width=120)


def _md(text: Any) -> str:
    """Plain text safe inside Markdown (tables included): one line, no emphasis, no HTML.

    Only what would change the rendering is escaped, so the raw file stays readable.
    """
    text = " ".join(str(text).split())
    for char in "\\`*<|":
        text = text.replace(char, "\\" + char)
    return text


def _code(text: Any) -> str:
    text = " ".join(str(text).split())
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}" if fence == "`" else f"{fence} {text} {fence}"


def render_markdown(report: dict[str, Any]) -> str:
    target = report["target"]
    profile = target["profile"] or "none (documented defaults)"
    if target["profile_file"]:
        profile = f"{profile} ({target['profile_file']})"
    rows = [
        ("result", f"**{report['result']}**"),
        *([("error", _md(report["error"]))] if report.get("error") else []),
        ("vLLM version", _md(target["vllm_version"] or "unknown")),
        ("judged as", _md(target.get("release") or "unknown")),
        *([("facts predicted", _md(", ".join(target["predicted_facts"])))] if target.get("predicted_facts") else []),
        ("model", _code(target["model"] or "unknown")),
        ("URL", _code(target["url"] or "none") + (" (embedded server)" if target["server"] == "embedded" else "")),
        ("serving profile", _md(profile)),
        ("expectations", _md(report["expectations"] or "none")),
        ("gate", _md(report.get("gate", "report"))),
        ("date", _md(report["date"])),
        ("plugin", _md(f"{report['plugin']['name']} {report['plugin']['version']}")),
    ]
    if target.get("routes"):
        rows.append(("route table", _md(target["routes"])))
    if target.get("routes_not_mounted"):
        rows.append(("routes not mounted here", _md(", ".join(target["routes_not_mounted"]))))
    for name, value in report.get("selection", {}).items():
        rows.append((f"selection ({name})", _code(value)))
    lines = [f"# vLLM conformance report: {report['result']}", "", "| | |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    if report.get("replicas"):
        lines += ["", "## Replicas", "", "| replica | URL | vLLM version | model | result |", "|---|---|---|---|---|"]
        for replica in report["replicas"]:
            result = replica["result"] + (f": {replica['problem']}" if replica.get("problem") else "")
            lines.append(
                f"| {_md(replica['name'])} | {_code(replica['url'] or 'none')} | "
                f"{_md(replica['vllm_version'] or 'unknown')} | {_code(replica['model'] or 'unknown')} | "
                f"{_md(result)} |"
            )
    lines += [
        "",
        "## Features",
        "",
        "| feature | claimed | result | checked | passed | failed | known departure | undecided | skipped "
        "| not claimed |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, feature in report["features"].items():
        counts = feature["counts"]
        lines.append(
            f"| {_md(name)} | {'yes' if feature['claimed'] else 'no'} | {_md(feature['result'])} | "
            f"{_md(feature.get('checked') or '—')} | "
            f"{counts[PASSED]} | {counts[FAILED]} | {counts.get(_key(KNOWN_DEPARTURE), 0)} | "
            f"{counts.get(UNDECIDED, 0)} | {counts[SKIPPED]} | "
            f"{counts[_key(NOT_CLAIMED)]} |"
        )
    for name, feature in report["features"].items():
        details = _feature_details(feature)
        if details:
            lines += ["", f"## {_md(name)}: {_md(feature['result'])}", "", _md(feature["description"]), *details]
    return "\n".join(lines) + "\n"


def _feature_details(feature: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if feature.get("problem"):
        lines += ["", f"**Fails**: {_md(feature['problem'])}"]
    hidden = feature.get("not_exposed_by_ingress")
    if hidden:
        lines += ["", f"**Not exposed by the ingress**: {hidden['tests']} check(s), {len(hidden['routes'])} route(s)"]
    titles = (FAILED, "Failed"), (KNOWN_DEPARTURE, "Known departures"), (UNDECIDED, "Undecided")
    for outcome, title in (*titles, (SKIPPED, "Skipped")):
        tests = feature.get(_key(outcome))
        if tests:
            lines += ["", f"**{title}**", ""]
            lines += [f"- {_code(t['contract'])} {_code(t['test'])}: {_md(t['reason'])}" for t in tests]
    if feature.get("evidence"):
        lines += ["", "**What the passes judged**", ""]
        lines += [
            f"- {_code(e['contract'])} ({e['passed']} passed): judged {_md(e['judged'])}" for e in feature["evidence"]
        ]
    if feature.get("figures"):
        lines += ["", "**Figures**", ""]
        lines += [
            f"- {_code(t['contract'])} {_code(t['test'])} ({_md(t['outcome'])}): {_md(t['figures'])}"
            + (f" [picture]({quote(t['picture'])})" if t.get("picture") else "")
            for t in feature["figures"]
        ]
    not_claimed = feature.get(_key(NOT_CLAIMED))
    if not_claimed:
        lines += ["", "**Not claimed**", ""]
        for entry in not_claimed:
            tests = f"{entry['tests']} test{'s' if entry['tests'] != 1 else ''}"
            lines.append(f"- {_code(entry['contract'])} ({tests}): {_md(entry['reason'])}")
    return lines


def write(report_path: Path, report: dict[str, Any]) -> tuple[Path, Path | None]:
    """Write the YAML and its Markdown twin, each replaced whole (never half-written).

    What the path names is written, never replaced (``write_output``). A YAML sent to a device or a FIFO
    (``/dev/null``, ``/dev/stdout``) has no twin beside it: no ``/dev/null.md`` is made; the twin is None then."""
    write_output(report_path, render_yaml(report))
    if not is_file_or_new(report_path):
        return report_path, None
    md_path = markdown_path(report_path)
    write_output(md_path, render_markdown(report))
    return report_path, md_path


def is_file_or_new(path: Path) -> bool:
    """A regular file (or a link to one), or nothing yet: a path a report file is made at."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):  # ValueError: a NUL in the name, which output_problem refuses
        return False


def write_output(path: Path, text: str) -> None:
    """Write ``text`` to what ``path`` names, never replacing the path itself.

    A regular file (or a new one) is replaced whole, atomically, so a reader never sees half a report; through a
    symbolic link, its target is, and the link stays. A device or a FIFO (``/dev/null``, ``/dev/stdout``, a pipe a
    CI step reads) is written as it is: replacing it would put a regular file where the device node was (as root,
    in /dev). A directory or a socket is an OSError, as every unwritable path is."""
    try:
        mode: int | None = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
    if mode is not None and stat.S_ISSOCK(mode):
        raise OSError(errno.EINVAL, "Is a socket, not a file", str(path))
    if mode is not None and not stat.S_ISREG(mode):
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)
        return
    _write_atomically(Path(os.path.realpath(path)), text)


def output_problem(path: Path) -> str | None:
    """Why ``path`` cannot take an output file, asked before a run spends its time (None: it can)."""
    if "\x00" in str(path):
        return "holds a NUL character, which no file name can"
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        target = Path(os.path.realpath(path))
        ancestor = next((parent for parent in target.parents if os.path.lexists(parent)), Path("/"))
        if not ancestor.is_dir():
            return f"{ancestor} is not a directory"
        if not os.access(ancestor, os.W_OK | os.X_OK):
            return f"cannot create files in {ancestor} (permission denied)"
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISDIR(mode):
        return "is a directory: give a file's path"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    if not os.access(path, os.W_OK):
        return "is not writable (permission denied)"
    if stat.S_ISREG(mode) and not os.access(Path(os.path.realpath(path)).parent, os.W_OK | os.X_OK):
        return f"cannot replace it: its folder {Path(os.path.realpath(path)).parent} is not writable"
    return None


def shown(path: Path) -> str:
    """A path as a one-line message names it: quoted and escaped when it holds a newline or another control."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def same_file(one: Path, other: Path) -> bool:
    """Whether two paths name one file (through links, ``..``, another spelling of the folder)."""
    try:
        return os.path.samefile(one, other)
    except (OSError, ValueError):
        return os.path.realpath(one) == os.path.realpath(other)


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide the report from a CI uploader
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
