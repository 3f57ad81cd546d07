"""What a vLLM server said while it started: findings quoted with their line numbers, and its phases timed.

The kinds of finding and the texts that reveal them are contract data
(fact ``startup_log_findings``); this module only reads a log, line by line
so that a long-running server's log is never held in memory, and keeps the
matching lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.catalogue.release_facts import StartupLogClocks, StartupPhase
from pytest_vllm_conformance.connection.launcher import CLOCKS

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
QUOTE_CHARS = 400
KEPT_PER_KIND = 50


class LogUnreadable(Exception):
    """The log file named by the run cannot be read, or is not a vLLM log to judge."""


@dataclass(frozen=True)
class FindingKind:
    """One kind of finding (``unknown_env``): what it means and the log texts that show it."""

    kind: str
    meaning: str
    patterns: tuple[re.Pattern[str], ...] = field(compare=False)

    @property
    def id(self) -> str:
        return self.kind

    def __str__(self) -> str:
        return self.kind

    def matches(self, line: str) -> bool:
        return any(pattern.search(line) for pattern in self.patterns)


def finding_kinds(fact: Mapping[str, Mapping[str, Any]]) -> list[FindingKind]:
    return [
        FindingKind(kind, entry["meaning"], tuple(re.compile(p) for p in entry["patterns"]))
        for kind, entry in fact.items()
    ]


@dataclass(frozen=True)
class LogLine:
    number: int
    text: str

    def quote(self, path: Path) -> str:
        text = self.text if len(self.text) <= QUOTE_CHARS else self.text[:QUOTE_CHARS] + "..."
        return f"{path.name}:{self.number}: {text}"


@dataclass(frozen=True)
class StartupLog:
    path: Path
    found: Mapping[str, tuple[LogLine, ...]]
    counts: Mapping[str, int]
    total_lines: int = 0
    # Lines in vLLM's own log format: a file without any is not a vLLM server's log.
    vllm_lines: int = 0

    def not_a_vllm_log(self) -> str | None:
        """Why this file cannot be judged as a vLLM start-up log, or None."""
        if self.total_lines == 0:
            return f"{self.path}: the log is empty, so nothing in it can be checked"
        if self.vllm_lines == 0:
            return (
                f"{self.path}: not a vLLM log: none of its {self.total_lines} line(s) has vLLM's log format "
                "(LEVEL MM-DD HH:MM:SS [file.py:N] message)"
            )
        return None

    def lines(self, kind: FindingKind | str) -> tuple[LogLine, ...]:
        return self.found.get(str(kind), ())

    def quote(self, kind: FindingKind | str) -> str:
        """Every kept line of the kind, one per line, and how many more there were."""
        lines = self.lines(kind)
        text = "\n".join(f"  {line.quote(self.path)}" for line in lines)
        more = self.counts.get(str(kind), 0) - len(lines)
        return text + (f"\n  ...and {more} more" if more > 0 else "")


def scan(path: Path, kinds: list[FindingKind], signature: str | None = None) -> StartupLog:
    """``signature``: a regular expression one line of a vLLM log matches (fact ``startup_log_signature``)."""
    found: dict[str, list[LogLine]] = {kind.kind: [] for kind in kinds}
    counts = dict.fromkeys(found, 0)
    vllm_format = re.compile(signature) if signature else None
    total = vllm_lines = 0
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            for number, raw in enumerate(log, start=1):
                line = ANSI_ESCAPE.sub("", raw.rstrip("\r\n"))
                total = number
                if vllm_format is not None and vllm_format.search(line):
                    vllm_lines += 1
                for kind in kinds:
                    if kind.matches(line):
                        counts[kind.kind] += 1
                        if len(found[kind.kind]) < KEPT_PER_KIND:
                            found[kind.kind].append(LogLine(number, line))
    except OSError as exc:
        raise LogUnreadable(f"vLLM log {path}: cannot read it: {exc.strerror or exc}") from None
    return StartupLog(Path(path), {k: tuple(v) for k, v in found.items()}, counts, total, vllm_lines)


def read_startup_log(path: Path, expect: Expectations) -> StartupLog:
    """The log at ``path`` scanned once for every kind of finding the contract data knows (raises LogUnreadable,
    also for a file that is empty or not a vLLM log)."""
    kinds = finding_kinds(expect.fact("startup_log_findings"))
    scanned = scan(path, kinds, expect.fact("startup_log_signature"))
    problem = scanned.not_a_vllm_log()
    if problem:
        raise LogUnreadable(problem)
    return scanned


def startup_log_findings(ctx: CaseContext) -> list[FindingKind]:
    """Every kind of finding the contract data knows (read without a server: every version's spelling)."""
    return finding_kinds(ctx.expect.fact("startup_log_findings"))


# ---- start-up phases: how long each took, against a baseline log -----------------------------------

TIMESTAMP = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[")


@dataclass(frozen=True)
class PhaseRule:
    """One phase of a start (fact ``startup_log_phases``): a line saying how long it took, or a line whose
    timestamp ends it (measured from the log's first timestamp)."""

    name: str
    meaning: str
    took: re.Pattern[str] | None = None  # group ``seconds``
    ends: re.Pattern[str] | None = None
    # A path a start may or may not take (torch.compile, absent with --enforce-eager), not a line every start logs.
    optional: bool = False


def phase_rules(fact: Mapping[str, Mapping[str, Any]]) -> list[PhaseRule]:
    return [
        PhaseRule(
            name,
            entry["meaning"],
            re.compile(entry["took"]) if entry.get("took") else None,
            re.compile(entry["ends"]) if entry.get("ends") else None,
            bool(entry.get("optional")),
        )
        for name, entry in fact.items()
    ]


def _seconds_of_year(match: re.Match[str]) -> int:
    month, day, hour, minute, second = (int(g) for g in match.groups())
    # vLLM's timestamps carry no year; a start does not span months, so a day of 31 is enough.
    return (((month * 31 + day) * 24 + hour) * 60 + minute) * 60 + second


@dataclass(frozen=True)
class Phases:
    path: Path
    seconds: Mapping[str, float]  # phase -> seconds; a phase the log does not show is absent
    rules: tuple[PhaseRule, ...] = ()

    def line(self) -> str:
        shown = ", ".join(f"{name} {value:.2f} s" for name, value in self.seconds.items())
        return f"{self.path.name}: {shown or 'no phase found'}"


def phases(path: Path, rules: list[PhaseRule]) -> Phases:
    """The phases ``path`` shows. A phase logged more than once (one line per worker) counts its longest."""
    seconds: dict[str, float] = {}
    first: int | None = None
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            for raw in log:
                line = ANSI_ESCAPE.sub("", raw)
                stamp = TIMESTAMP.search(line)
                if stamp and first is None:
                    first = _seconds_of_year(stamp)
                for rule in rules:
                    took = rule.took.search(line) if rule.took else None
                    if took:
                        seconds[rule.name] = max(seconds.get(rule.name, 0.0), float(took.group("seconds")))
                    elif rule.ends and stamp and first is not None and rule.ends.search(line):
                        seconds.setdefault(rule.name, float(_seconds_of_year(stamp) - first))
    except OSError as exc:
        raise LogUnreadable(f"vLLM log {path}: cannot read it: {exc.strerror or exc}") from None
    ordered = {rule.name: seconds[rule.name] for rule in rules if rule.name in seconds}
    return Phases(Path(path), ordered, tuple(rules))


def grown(target: Phases, baseline: Phases, *, max_growth: float, min_seconds: float) -> list[str]:
    """Each phase that took more than ``1 + max_growth`` times the baseline's and ``min_seconds`` longer.

    A phase the baseline does not show counts from zero: a start that took a path the baseline's did not
    (a compilation a warm restart should have found cached) shows up as the phase it added.
    """
    found = []
    for name, seconds in target.seconds.items():
        before = baseline.seconds.get(name, 0.0)
        if seconds > before * (1 + max_growth) and seconds - before > min_seconds:
            was = f"{before:.2f} s" if name in baseline.seconds else "absent"
            found.append(f"{name} took {seconds:.2f} s, the baseline's {was} (+{seconds - before:.2f} s)")
    return found


def not_compared(target: Phases, baseline: Phases) -> list[str]:
    """Why the comparison of ``target`` with ``baseline`` cannot be whole: each phase every start logs that the
    baseline shows and the target does not (its log line changed, or the log was cut), or a target with no phase.

    A phase missing is not a phase that took no time: a reworded line would otherwise hide the slowest phase.
    """
    if not target.seconds:
        return [f"the target log shows no start-up phase ({target.path.name}), so none was compared"]
    rules = {rule.name: rule for rule in target.rules}
    return [
        f"{name} ({rules[name].meaning if name in rules else name}): the baseline shows it, the target log does not "
        "(a changed log line, or a log cut short), so it was not compared"
        for name in baseline.seconds
        if name not in target.seconds and not (name in rules and rules[name].optional)
    ]


def startup_phases(path: Path, fact: Mapping[str, StartupPhase]) -> Phases:
    """The phases of the log at ``path`` by the fact ``startup_log_phases`` (raises LogUnreadable)."""
    return phases(path, phase_rules(fact))


# ---- a start's clocks, as a log shows them (a server given by URL, whose start no run timed) ----

LOG_ORIGIN = "from the log's first line (after Python's imports: later than the spawn)"


@dataclass(frozen=True)
class LogClocks:
    """The clocks of the start a log shows, in whole seconds from its first line; a clock no line marks is in
    ``unread`` with why."""

    path: Path
    seconds: Mapping[str, float]
    unread: Mapping[str, str]

    def line(self) -> str:
        parts = [
            f"{words} {self.seconds[name]:.0f} s" if name in self.seconds else f"{words}: {self.unread[name]}"
            for name, words in CLOCKS.items()
        ]
        return f"{self.path.name}, {LOG_ORIGIN}: " + "; ".join(parts)


def log_clocks(path: Path, fact: StartupLogClocks) -> LogClocks:
    """The clocks ``path`` shows by the fact ``startup_log_clocks`` (raises LogUnreadable)."""
    marked = {name: fact[name] for name in CLOCKS if fact.get(name)}  # type: ignore[literal-required]
    rules = [PhaseRule(name, CLOCKS[name], ends=re.compile(str(line))) for name, line in marked.items()]
    seen = phases(path, rules).seconds
    unread = {
        name: fact["first_token_unread"] if name == "first_token" else "no line of the log marks it"
        for name in CLOCKS
        if name not in seen
    }
    for name in marked:
        if name not in seen:
            unread[name] = "the log has no line saying so (the server never got there, or the log is cut)"
    return LogClocks(Path(path), seen, unread)
