"""The reporting plugin object: listens to pytest's hooks, never called by suites.

``hooks.py`` registers one ``ConformanceReporter`` per pytest process. In
every process it scrubs what pytest shows (header lines, warnings, log
records; test reports are scrubbed by ``hooks.py`` as they are made). Only
in the process that controls the run (not in a pytest-xdist worker, whose
reports reach the controller anyway) does it judge the features, write the
``--vllm-report`` files, finish the JUnit file and print the summary, so
each happens once per run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_vllm_conformance import KNOWN_DEPARTURE, UNDECIDED, __version__
from pytest_vllm_conformance.connection.client import display_url
from pytest_vllm_conformance.observed import replicas as fleet
from pytest_vllm_conformance.plugin.run import RunState
from pytest_vllm_conformance.reporting import junit, report_files
from pytest_vllm_conformance.reporting.outcomes import (
    NOT_RUN,
    OUTCOMES,
    PARTIAL,
    FeatureResult,
    OutcomeCollector,
    feature_results,
    nothing_judged,
    overall_result,
    replica_results,
)
from pytest_vllm_conformance.reporting.redaction import LogRecordRedaction, url_password

PLUGIN_NAME = "vllm-conformance-reporter"
SUMMARY_TITLE = "vLLM conformance"
UNDECIDED_LISTED = 20


def profile_digest(data: Any) -> str:
    """The profile's content as one hash: the same declarations, whatever the file's layout or comments."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


class ConformanceReporter:
    def __init__(self, config: pytest.Config, state: RunState) -> None:
        """``state`` is the plugin's RunState: settings, catalogue, profile, redactor, and the facts once known."""
        self.config = config
        self.state = state
        self.redactor = state.redactor
        # A URL given as scheme://user:password@host: its password is a secret too.
        for url in state.settings.url:
            self.redactor.add(url_password(url))
        self.collector = OutcomeCollector()
        self.started = datetime.now(UTC)
        self.controls_run = not hasattr(config, "workerinput")
        # Resolved now, as pytest's JUnit writer does: a test may change the working directory.
        self.junit_path = self._junit_path(config)
        self.report_path = self._report_path(state.settings.report)
        if self.controls_run and self.report_path is not None and not config.option.collectonly:
            self._check_report_path(self.report_path)
        self.results: list[FeatureResult] = []
        # Cut short (Ctrl-C, SIGTERM, pytest's "Interrupted"): its result says so, whatever the tests that ran say.
        self.interrupted = False
        self.written: tuple[Path, Path | None] | None = None
        self.write_error: str | None = None
        self.log_redaction = LogRecordRedaction(self.redactor)
        if state.plugin_run:  # a guest's run (no option of ours) knows no secret: its log records stay its own
            self.log_redaction.install()

    @property
    def ours(self) -> bool:
        """A run of the plugin's: it sets one of its options, or ran one of its contract tests. Any other run is a
        guest's, in a venv where the plugin is installed: its output, files and exit status are left alone."""
        return self.state.plugin_run or bool(self.collector.tests)

    @staticmethod
    def _report_path(path: Path | None) -> Path | None:
        if path is None:
            return None
        if path.suffix.lower() == ".md":
            raise pytest.UsageError(
                f"--vllm-report {path}: name the YAML file (e.g. report.yaml); its Markdown twin is written beside it"
            )
        # Absolute, not resolved: a link (/dev/stdout) is written through, never replaced by a file.
        return Path(os.path.abspath(path.expanduser()))

    def _check_report_path(self, path: Path) -> None:
        """Before any test runs: a report path that cannot be written, or that names another file of the run (its
        profile, its JUnit file...), is a usage error, not a line after the last test."""
        twins = [path, report_files.markdown_path(path)] if report_files.is_file_or_new(path) else [path]
        for twin in twins:
            problem = report_files.output_problem(twin)
            if problem is not None:
                which = "" if twin == path else f"its Markdown twin {report_files.shown(twin)} "
                raise pytest.UsageError(f"--vllm-report {report_files.shown(path)}: {which}{problem}")
        others = {f"--{option.replace('_', '-')}": value for option, value in self._other_paths().items()}
        if self.junit_path is not None:
            others["--junitxml"] = self.junit_path
        for twin in twins:
            for flag, other in others.items():
                if report_files.same_file(twin, other):
                    which = "it" if twin == path else f"its Markdown twin {twin}"
                    raise pytest.UsageError(
                        f"--vllm-report {path}: {which} is also {flag}: the report would overwrite it; "
                        "give another path"
                    )

    def _other_paths(self) -> dict[str, Path]:
        settings = self.state.settings
        paths = {
            f"vllm_{field.name}": value
            for field in dataclasses.fields(settings)
            if field.name != "report" and isinstance(value := getattr(settings, field.name), Path)
        }
        return paths

    @staticmethod
    def _junit_path(config: pytest.Config) -> Path | None:
        xmlpath = getattr(config.option, "xmlpath", None)
        if not xmlpath:
            return None
        return Path(os.path.abspath(os.path.expanduser(os.path.expandvars(xmlpath))))

    # ---- scrubbing what pytest shows --------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_report_header(self, config: pytest.Config, start_path: Path) -> Any:
        lines = yield
        if not self.state.plugin_run:
            return lines
        return [
            self.redactor(item) if isinstance(item, str) else [self.redactor(line) for line in item] for item in lines
        ]

    @pytest.hookimpl(trylast=True)
    def pytest_warning_recorded(self) -> None:
        if not self.state.plugin_run:
            return
        # The terminal reporter has just stored the warning's text for its summary.
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        for warning in getattr(terminal, "stats", {}).get("warnings", []):
            if isinstance(getattr(warning, "message", None), str):
                warning.message = self.redactor(warning.message)

    # ---- outcomes ------------------------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.collector.add(report)

    @pytest.hookimpl(trylast=True)  # after pytest's own JUnit writer has written its file
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.controls_run or not self.ours:
            return
        self.interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED
        self.results = feature_results(self.state.catalogue.statements(), self.collector.finished())
        failed_anyway = any(result.problem for result in self.results)
        if (
            failed_anyway or self.gate_failures() or self.nothing_judged()
        ) and session.exitstatus == pytest.ExitCode.OK:
            # --vllm-gate=strict: a claimed feature that was not fully checked fails the promotion;
            # under any gate, a feature the ingress hid whole, or a run that claimed nothing or whose claimed
            # checks all ended without a verdict, judged nothing.
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.report_path is not None and not self.config.option.collectonly:
            report = report_files.build(self._run_info(int(session.exitstatus)), self.results, self.redactor)
            try:
                self.written = report_files.write(self.report_path, report)
            except OSError as exc:
                # A gate whose report went missing must not pass: the pipeline relies on the file.
                self.write_error = f"{self.report_path}: {exc.strerror or exc}"
                if session.exitstatus == pytest.ExitCode.OK:
                    session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        if self.junit_path is not None and self.junit_path.is_file():
            junit.rewrite(self.junit_path, self.config.getini("junit_family"), self.redactor, self._suite_properties())

    def write_refused(self, error: str) -> None:
        """A usage error after configuration (no server reached): the report says so, the error its verdict."""
        if self.report_path is None or not self.controls_run:
            return
        run = self._run_info(int(pytest.ExitCode.USAGE_ERROR))
        if run.url is None and len(self.state.settings.url) == 1:
            run.url = display_url(self.state.settings.url[0])
        try:
            self.written = report_files.write(self.report_path, report_files.refused(run, error, self.redactor))
        except OSError:
            pass  # the usage error is what the run says; an unwritable report would only hide it

    def overall(self) -> str:
        """The run's one word, as its report and its JUnit file say it."""
        return report_files.INTERRUPTED if self.interrupted else overall_result(self.results)

    def nothing_judged(self) -> str:
        return nothing_judged(self.results)

    def gate_failures(self) -> list[FeatureResult]:
        if self.state.settings.gate != "strict":
            return []
        return [result for result in self.results if result.result == PARTIAL]

    def _run_info(self, exit_status: int) -> report_files.RunInfo:
        state = self.state
        facts = state.facts
        run = report_files.RunInfo(started=self.started, plugin_version=__version__, exit_status=exit_status)
        if facts is not None:
            run.url = display_url(facts.url)
            run.vllm_version = facts.version
            run.release = state.catalogue.judgement(facts.version, facts.parsed_version)
            if facts.parsed_version is not None and not state.catalogue.releases.is_newer(facts.parsed_version):
                run.predicted_facts = state.catalogue.predicted_facts(facts.parsed_version)[0]
            run.model = facts.model
            run.expectations = state.expectations().basis
            if facts.inventory is not None:
                run.routes = facts.inventory.source
                run.routes_not_mounted = facts.inventory.not_mounted
        run.replicas = self.replica_entries()
        run.gate = state.settings.gate
        run.embedded_server = bool(state.connection is not None and state.connection.server is not None)
        if state.profile is not None:
            run.profile_name = state.profile.name
            run.profile_path = str(state.profile.path) if state.profile.path else None
            run.profile_sha256 = profile_digest(state.profile.data)
        if state.shard is not None:
            run.shard = dict(state.shard)
            run.observed = dict(facts.observed) if facts is not None and facts.observed else None
            # What the fleet decides a replica's side by, so that the merge decides as the in-process fleet does.
            rules = dataclasses.asdict(fleet.declared_by(state.expectations()))
            run.fleet_rules = {
                key: list(value) if isinstance(value, tuple) else value for key, value in rules.items() if value
            }
        option = self.config.option
        selection = {"markers": getattr(option, "markexpr", ""), "keywords": getattr(option, "keyword", "")}
        run.selection = {name: value for name, value in selection.items() if value}
        return run

    def replica_entries(self) -> list[dict[str, Any]]:
        """A fleet: each replica, where it is, what it runs, and its own result; empty for one target."""
        state = self.state
        if not state.fleet:
            return []
        names = [target.name for target in state.targets]
        results = replica_results(state.catalogue.statements(), self.collector.finished(), names)
        entries = []
        for target in state.targets:
            facts = target.facts
            entry: dict[str, Any] = {
                "name": target.name,
                "url": display_url(target.base_url or target.given_url or ""),
                "vllm_version": facts.version if facts else None,
                "model": facts.model if facts else None,
                "result": results[target.name],
            }
            if target.labels:
                entry["labels"] = dict(target.labels)
            if target.problem:
                entry["problem"] = target.problem
            entries.append(entry)
        return entries

    def _suite_properties(self) -> dict[str, str]:
        """Run-wide facts as testsuite properties, valid in every JUnit family."""
        facts = self.state.facts
        values = {"vllm_conformance_result": self.overall()}
        if facts is not None:
            values.update(
                vllm_version=facts.version or "unknown", vllm_model=facts.model, vllm_url=display_url(facts.url)
            )
        replicas = self.replica_entries()
        if replicas:
            values["vllm_replicas"] = ", ".join(f"{entry['name']}={entry['result']}" for entry in replicas)
        if self.state.profile is not None:
            values["vllm_profile"] = self.state.profile.name
        if self.written is not None:
            values["vllm_report"] = str(self.written[0])
        return values

    # ---- the terminal ------------------------------------------------------------------

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        ran = any(result.counts[o] for result in self.results for o in OUTCOMES)
        if not self.controls_run or not (ran or self.write_error or (self.interrupted and self.ours)):
            return
        terminalreporter.write_sep("-", f"{SUMMARY_TITLE}: {self.overall()}")
        for line in self.summary_lines():
            terminalreporter.write_line(self.redactor(line))

    def summary_lines(self) -> list[str]:
        lines = []
        facts = self.state.facts
        replicas = self.replica_entries()
        for entry in replicas:
            where = f"vLLM {entry['vllm_version'] or 'unknown'}, model {entry['model']}, at {entry['url']}"
            lines.append(f"replica {entry['name']}: {entry['result']}: {entry.get('problem') or where}")
        if facts is not None and not replicas:
            profile = f"profile {self.state.profile.name}" if self.state.profile else "no profile"
            lines.append(
                f"vLLM {facts.version or 'unknown'}, model {facts.model}, at {display_url(facts.url)} ({profile})"
            )
        # Only the features the run touched: a one-feature selection is not followed by every other's "not run".
        touched = [result for result in self.results if result.result != NOT_RUN]
        width = max((len(result.name) for result in touched), default=0)
        result_width = max((len(result.result) for result in touched), default=0)
        for result in touched:
            counts = ", ".join(f"{result.counts[o]} {o}" for o in OUTCOMES if result.counts[o])
            checked = f"{result.coverage}: " if result.claimed else ""
            hidden = f", {result.not_exposed} not exposed by the ingress" if result.not_exposed else ""
            lines.append(
                f"  {result.name:<{width}}  {result.result:<{result_width}}  {checked}{counts}{hidden}".rstrip()
            )
            if result.problem:
                lines.append(f"  {'':<{width}}  {result.problem}")
        lines += self.undecided_lines()
        if self.interrupted:
            by = f" by {self.state.interrupted_by}" if self.state.interrupted_by else ""
            lines.append(
                f"the run was interrupted{by}: the verdicts above cover only the tests that ran, not the selection"
            )
        if self.nothing_judged():
            lines.append(self.nothing_judged())
        failing = self.gate_failures()
        if failing:
            names = ", ".join(f"{result.name} ({result.coverage})" for result in failing)
            lines.append(f"--vllm-gate=strict: partial feature(s) fail the run: {names}")
        if self.written is not None:
            yaml_path, md_path = self.written
            lines.append(f"report: {yaml_path} and {md_path}" if md_path else f"report: {yaml_path}")
        if self.write_error is not None:
            lines.append(f"report NOT written: {self.write_error}")
        return lines

    def undecided_lines(self) -> list[str]:
        """Each known departure and each undecided test, and why, as pytest's -rs lists skips (pytest's own summary
        knows no such outcomes)."""
        lines = []
        for word, tests in (
            (KNOWN_DEPARTURE, [test for result in self.results for test in result.departed]),
            (UNDECIDED, [test for result in self.results for test in result.undecided]),
        ):
            lines += [f"{word.upper()} {test.test_id}: {test.reason}" for test in tests[:UNDECIDED_LISTED]]
            if len(tests) > UNDECIDED_LISTED:
                lines.append(f"... and {len(tests) - UNDECIDED_LISTED} more {word} (the report lists every one)")
        return lines

    def pytest_unconfigure(self) -> None:
        self.log_redaction.uninstall()
