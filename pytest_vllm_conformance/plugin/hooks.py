"""pytest wiring: options, markers, the run's target, collection and reporting hooks.

Everything here delegates to the rooms: ``options`` and ``run`` (the run's
configuration and state), ``connection.connect`` (the launcher and discovery
behind one call), ``targets`` (a fleet's replicas), the catalogue's
``contracts``, ``cases`` and ``route_cases``, ``selection`` and ``verdicts``
(what a run selected and how each test ends), and ``reporter`` (the report
files and the summary). The fixtures live in ``plugin/fixtures.py``.
"""

from __future__ import annotations

import itertools
import shutil
import signal
import threading
from collections.abc import Generator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_vllm_conformance import CONTRACT_MARKER, EACH_MARKER, NOT_CLAIMED, __version__
from pytest_vllm_conformance.catalogue import cases, contracts, route_cases
from pytest_vllm_conformance.catalogue.applicability import CLAIMED, UNMEETABLE
from pytest_vllm_conformance.connection.connect import NO_TARGET, configured, establish
from pytest_vllm_conformance.connection.settings import Settings
from pytest_vllm_conformance.plugin import options, selection, targets, verdicts
from pytest_vllm_conformance.plugin.option_table import OPTIONS
from pytest_vllm_conformance.plugin.reporter import PLUGIN_NAME as REPORTER_NAME
from pytest_vllm_conformance.plugin.reporter import ConformanceReporter
from pytest_vllm_conformance.plugin.run import (
    STATE,
    RunState,
    TargetState,
    configure_run,
    run_state,
    shard_declaration,
)
from pytest_vllm_conformance.plugin.targets import REPLICA_PROPERTY, TARGET_PARAMETER, target_of
from pytest_vllm_conformance.reporting import report_files
from pytest_vllm_conformance.reporting.redaction import Redactor, scrub_report

pytest_plugins = ("pytest_vllm_conformance.plugin.fixtures",)


# A claimed contract whose case source found nothing: its one placeholder case fails at setup.
NO_CASES = pytest.mark.vllm_no_cases
WORKER_INPUT_KEY = "vllm_conformance"
# Fixtures that need a server; a run that uses one without a target stops once.
TARGET_FIXTURES = frozenset(
    {
        "vllm_target",
        "vllm_facts",
        "vllm_client",
        "vllm_async_client",
        "vllm_expect",
        "vllm_openai",
        "vllm_ingress_client",
        "vllm_direct_client",
        "vllm_fleet",
    }
)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.register(parser)


def pytest_configure(config: pytest.Config) -> None:
    catalogue = contracts.load()
    config.addinivalue_line("markers", f"{CONTRACT_MARKER}(id): the catalogue contract this test checks")
    config.addinivalue_line(
        "markers", f"{EACH_MARKER}(argname, source): run the test once per case the source function yields"
    )
    config.addinivalue_line("markers", f"{NO_CASES.name}(reason): set by the plugin on a claimed contract with no case")
    config.addinivalue_line("markers", "version_matrix: runs against older vLLM releases (opt-in, slow)")
    for feature in catalogue.features.values():
        config.addinivalue_line("markers", f"{feature.name}: {feature.statement}")
    try:
        state = configure_run(config)
    except pytest.UsageError as exc:
        _report_usage_error(config, str(exc))
        raise
    _group_replicas(config, state)
    if state.plugin_run:
        _rewrite_only_test_modules(config)
    # Report files, the JUnit finish, the summary, and scrubbing of log records, warnings and headers.
    config.pluginmanager.register(ConformanceReporter(config, state), REPORTER_NAME)
    _interrupt_on_sigterm(config, state)


def _rewrite_only_test_modules(config: pytest.Config) -> None:
    """pytest marks an installed plugin's package (or, in an editable install, ``suites``) for assert rewriting, so
    every floor and feature folder module was rewritten on import in every run (0.8 s a run); the suites' test
    modules are rewritten by their file names anyway, and the rest asserts nothing a test reads."""
    marked = getattr(getattr(config.pluginmanager, "rewrite_hook", None), "_must_rewrite", None)
    if isinstance(marked, set):
        marked.difference_update(("pytest_vllm_conformance", "suites"))


def _interrupt_on_sigterm(config: pytest.Config, state: RunState) -> None:
    """SIGTERM (a CI job's deadline, Kubernetes stopping the pod) ends a run of ours as Ctrl-C does: pytest's
    KeyboardInterrupt, so the report, the JUnit file and the summary are written, saying ``interrupted``, before
    the embedded server is stopped. Only where SIGTERM still kills outright: a handler the user set is theirs."""
    if hasattr(config, "workerinput") or not state.plugin_run:
        return
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def interrupt(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        state.interrupted_by = "SIGTERM"
        raise KeyboardInterrupt("SIGTERM")

    def restore() -> None:
        if signal.getsignal(signal.SIGTERM) is interrupt:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    signal.signal(signal.SIGTERM, interrupt)
    config.add_cleanup(restore)


def _report_usage_error(config: pytest.Config, error: str) -> None:
    """--vllm-report for a run its inputs stopped (exit 4): the file a pipeline publishes, the error its verdict."""
    if hasattr(config, "workerinput"):
        return
    path = options.report_path(config)
    if path is None or report_files.output_problem(path) is not None or _names_an_input(config, path):
        return
    run = report_files.RunInfo(started=datetime.now(UTC), plugin_version=__version__, exit_status=4)
    # A shard's report keeps its place in the set, so that the merge names the shard its inputs stopped.
    urls: tuple[str, ...] = tuple(options.resolved_alone(config, "url") or ())
    run.url = urls[0] if len(urls) == 1 else None
    partial = Settings(
        report=path,
        url=tuple(urls),
        shard=options.resolved_alone(config, "shard"),
        shard_replicas=options.resolved_alone(config, "shard_replicas") or (),
        shard_run=options.resolved_alone(config, "shard_run"),
    )
    try:
        run.shard = shard_declaration(partial)
    except pytest.UsageError:
        run.shard = None
    try:
        report_files.write(path, report_files.refused(run, error, Redactor()))
    except OSError:
        pass  # the usage error is what the run says; an unwritable report would only hide it


def _names_an_input(config: pytest.Config, path: Path) -> bool:
    """Whether the report (or its twin) is another file the run was given: the report of a refused run is never
    written over the profile whose error it would name."""
    twins = (path, report_files.markdown_path(path))
    for option in OPTIONS:
        if option.kind != "path" or option.key == "report":
            continue
        given = options.resolved_alone(config, option.key)
        if isinstance(given, Path) and any(report_files.same_file(twin, given) for twin in twins):
            return True
    return False


def _group_replicas(config: pytest.Config, state: RunState) -> None:
    """A fleet under xdist: each replica's tests on one worker at a time, replicas side by side."""
    if state.fleet and not hasattr(config, "workerinput") and config.getoption("dist", "no") in targets.GROUPED_DIST:
        state.header_notes.append(
            "vllm fleet: each replica's tests on one xdist worker at a time, replicas side by side"
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    state = run_state(config)
    if not state.fleet or config.getoption("dist", "no") not in targets.GROUPED_DIST:
        return None
    return targets.replica_scheduler(config, log, [target.name for target in state.targets])


ASYNCIO_LOOP_SCOPE = "asyncio_default_fixture_loop_scope"


def _state_the_loop_scope(config: pytest.Config) -> None:
    """pytest-asyncio warns on every run whose ini leaves its fixture loop scope unset (a run from the wheel, in a
    project of the user's). The plugin's async fixtures are function-scoped, so it states that scope, pytest-asyncio's
    coming default, when the user did not; pytest offers no public way to default an ini value, hence the cache."""
    try:
        if not config.getini(ASYNCIO_LOOP_SCOPE):
            config._inicache[ASYNCIO_LOOP_SCOPE] = "function"
    except (ValueError, AttributeError):  # pytest-asyncio absent, or a pytest that keeps ini values elsewhere
        pass


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if options.plugin_run(config):
        # Before any plugin's pytest_configure, where pytest-asyncio warns. Only in a run of ours: a guest's run
        # keeps its own loop scope (and its warning), as it would without the plugin installed.
        _state_the_loop_scope(config)
    if config.getoption("vllm_list_contracts"):
        print(contracts.render_catalogue(contracts.load()))
        return 0
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    state = run_state(config)
    handed_over = getattr(config, "workerinput", {}).get(WORKER_INPUT_KEY)
    if handed_over:
        targets.take_over(state, handed_over)
        return
    if not hasattr(config, "workerinput") and state.plugin_run:
        _check_selection(config)
    if hasattr(config, "workerinput") or not configured(state.settings) or config.option.collectonly:
        return
    # Looked up here, not in targets: a test may stand in for the server the plugin would start.
    try:
        targets.establish_all(state, establish)
    except pytest.UsageError as exc:
        reporter = config.pluginmanager.get_plugin(REPORTER_NAME)
        if isinstance(reporter, ConformanceReporter):
            reporter.write_refused(str(exc))
        raise


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: hand the discovered targets to each worker instead of probing again."""
    state = run_state(node.config)
    handed = targets.hand_over(state)
    if handed is not None:
        node.workerinput[WORKER_INPUT_KEY] = handed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under xdist, a test that talks to the server holds it shared; an exclusive feature's fixture holds it alone."""
    state = run_state(item.config)
    contract_id = _contract_id(item)
    exclusive = (
        contract_id is not None and state.catalogue.features[state.catalogue.contract(contract_id).feature].exclusive
    )
    if exclusive or not TARGET_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        yield
        return
    with target_of(state, item).run_lock.shared():
        yield


def _contract_id(node: pytest.Item | pytest.Function) -> str | None:
    marker = node.get_closest_marker(CONTRACT_MARKER)
    return marker.args[0] if marker is not None else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = run_state(metafunc.config)
    contract_id = _contract_id(metafunc.definition)
    sources = [marker.args for marker in metafunc.definition.iter_markers(EACH_MARKER)]
    if state.fleet and TARGET_PARAMETER in metafunc.fixturenames:
        _parametrize_per_replica(metafunc, state, contract_id, sources)
        return
    for argname, source in sources:
        metafunc.parametrize(argname, _cases(state, state.primary, contract_id, source))


def _cases(state: RunState, target: TargetState, contract_id: str | None, source: Any) -> list[Any]:
    """The source's cases on ``target``, each a pytest.param with its id."""
    claim = state.claim(contract_id, target) if contract_id else None
    if (claim is not None and not claim.claimed) or target.problem:
        # Decided at collection (pytest_collection_modifyitems) or at setup: one placeholder case says why.
        return [pytest.param(None, id="none")]
    context = cases.CaseContext(target.facts, state.expectations(target), state.settings, _replica_names(state))
    try:
        values = list(source(context))
    except (cases.NoCases, contracts.NoFact) as exc:
        values, reason = [], str(exc)
    else:
        reason = f"{source.__name__} found nothing to check on this server"
    if values:
        return [pytest.param(value, id=value.id) for value in values]
    # A claimed contract with nothing to check is an error, never a quiet skip.
    return [pytest.param(None, marks=NO_CASES(reason), id="none")]


def _replica_names(state: RunState) -> tuple[str, ...]:
    return tuple(target.name for target in state.targets) if state.fleet else ()


def _parametrize_per_replica(
    metafunc: pytest.Metafunc, state: RunState, contract_id: str | None, sources: list[Any]
) -> None:
    """A fleet: the test once per replica (and per case the replica's own facts give), ``[replica-case]``."""
    combos = []
    for target in state.targets:
        per_source = [_cases(state, target, contract_id, source) for _, source in sources]
        for picked in itertools.product(*per_source):
            marks = [mark for param in picked for mark in param.marks]
            ids = [target.name, *(str(param.id) for param in picked)]
            values = (target.name, *(param.values[0] for param in picked))
            combos.append(pytest.param(*values, marks=marks, id="-".join(ids)))
    if not sources:
        combos = [pytest.param(combo.values[0], marks=combo.marks, id=combo.id) for combo in combos]
        metafunc.parametrize(TARGET_PARAMETER, combos, indirect=True, scope="session")
        return
    argnames = [TARGET_PARAMETER, *(argname for argname, _ in sources)]
    metafunc.parametrize(argnames, combos, indirect=[TARGET_PARAMETER])


def _check_selection(config: pytest.Config, used: set[str] | None = None) -> None:
    """-m naming a word that is no marker: a usage error (its report says so), in a run of ours only."""
    try:
        selection.check(config, used or ())
    except pytest.UsageError as exc:
        reporter = config.pluginmanager.get_plugin(REPORTER_NAME)
        if isinstance(reporter, ConformanceReporter):
            reporter.write_refused(str(exc))
        raise


@pytest.hookimpl(tryfirst=True)  # before pytest's -m deselects what a mistyped word would
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    state = run_state(config)
    if not hasattr(config, "workerinput") and any(_contract_id(item) for item in items):
        _check_selection(config, {mark.name for item in items for mark in item.iter_markers()})
    for item in items:
        contract_id = _contract_id(item)
        if contract_id is None:
            continue
        try:
            contract = state.catalogue.contract(contract_id)
        except contracts.UnknownContract as exc:
            raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
        item.add_marker(contract.feature)
        item.user_properties.append(("vllm_contract", contract.id))
        item.user_properties.append(("vllm_feature", contract.feature))
        target = target_of(state, item)
        if state.fleet and TARGET_PARAMETER in getattr(item, "fixturenames", ()):
            item.user_properties.append((REPLICA_PROPERTY, target.name))
        if target.facts is not None:
            item.user_properties.append(("vllm_version", target.facts.version or "unknown"))
        if state.separate_ingress and state.catalogue.judged_at_ingress(contract):
            item.user_properties.append(("vllm_judged_at", "ingress"))
        claim = state.claim(contract.id, target)
        if claim.status != CLAIMED:
            # Typed: reporting reads these properties, not the skip message.
            item.user_properties.append(("vllm_claim", claim.status))
            item.user_properties.append(("vllm_claim_reason", claim.reason))
        if claim.status == NOT_CLAIMED:
            item.add_marker(pytest.mark.skip(reason=f"{NOT_CLAIMED}: {claim.reason}"))
        elif claim.unchecked:
            # Claimed, so a plain skip: its feature is partial, the report says what the run lacked.
            item.add_marker(pytest.mark.skip(reason=f"not checked: {claim.unchecked}"))
        elif _cannot_generate(target) and contract.feature != "discovery" and _talks_to_server(item):
            # One failure (discovery.ready_generates) says why, instead of every check failing on a 500.
            item.add_marker(pytest.mark.skip(reason=f"not checked: {_cannot_generate(target)}"))
    if state.fleet:
        # One replica after another (stable: each replica's tests keep the one-target order), so a
        # replica's session and module fixtures are set up once.
        order = {target.name: index for index, target in enumerate(state.targets)}
        items.sort(key=lambda item: order.get(_replica_of(item) or "", -1))
    # Last of all, whatever the order of the files: checks that stop the server the plugin started (SIGTERM).
    items.sort(key=lambda item: _stops_server(state, item))


def _stops_server(state: RunState, item: pytest.Item) -> bool:
    contract_id = _contract_id(item)
    if contract_id is None:
        return False
    return state.catalogue.features[state.catalogue.contract(contract_id).feature].stops_server


def _cannot_generate(target: TargetState) -> str | None:
    first = target.facts.first_generation if target.facts is not None else None
    if first is None or first.problem is None:
        return None
    return f"the server cannot generate (discovery.ready_generates): {first.problem}"


def _talks_to_server(item: pytest.Item) -> bool:
    return bool(TARGET_FIXTURES.intersection(getattr(item, "fixturenames", ())))


def _replica_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(TARGET_PARAMETER) if callspec is not None else None


def pytest_collection_finish(session: pytest.Session) -> None:
    # After -m/-k deselection: `-m preflight` needs no server even though other suites were collected.
    config = session.config
    state = run_state(config)
    needs_target = any(TARGET_FIXTURES.intersection(getattr(item, "fixturenames", ())) for item in session.items)
    if needs_target and state.facts is None and not config.option.collectonly and not hasattr(config, "workerinput"):
        raise pytest.UsageError(NO_TARGET)


def pytest_runtest_setup(item: pytest.Item) -> None:
    contract_id = _contract_id(item)
    if contract_id is None:
        return
    state = run_state(item.config)
    target = target_of(state, item)
    if target.problem and TARGET_PARAMETER in getattr(item, "fixturenames", ()):
        pytest.fail(target.problem, pytrace=False)
    claim = state.claim(contract_id, target)
    if claim.status == UNMEETABLE:
        pytest.fail(f"{contract_id}: {claim.reason}", pytrace=False)
    no_cases = item.get_closest_marker(NO_CASES.name)
    if no_cases is not None:
        pytest.fail(
            f"{contract_id} is claimed ({claim.reason}), but there is nothing to check: {no_cases.args[0]}",
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    if _contract_id(item) is None:
        return (yield)
    with verdicts.counting_answers(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    state = run_state(item.config)
    if _contract_id(item) is not None:
        verdicts.judge(item, call, report)
    elif not state.plugin_run:
        return report  # a guest's test, in a run that knows no secret: pytest's report as pytest made it
    scrub_report(state.redactor, report)
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(report: pytest.TestReport | pytest.CollectReport) -> tuple[str, str, str] | None:
    return verdicts.test_status(report)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    state = run_state(collector.config)
    if state.plugin_run:  # a run that sets no option knows no secret: a guest's collection is left alone
        scrub_report(state.redactor, report)
    return report


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = run_state(config)
    lines = []
    if state.fleet:
        lines.extend(targets.header_lines(state))
    elif state.facts is not None:
        facts = state.facts
        embedded = state.connection is not None and state.connection.server is not None
        lines.append(f"vllm target: {facts.url} ({'embedded server' if embedded else 'given'})")
        lines.append(
            f"vllm version: {facts.version or 'unknown'}; model: {facts.model}; max_model_len: {facts.max_model_len}"
        )
        lines.append(f"vllm release: {state.catalogue.judgement(facts.version, facts.parsed_version)}")
        lines.append(f"vllm expectations: {state.expectations().basis}")
        if facts.inventory is not None:
            lines.append(f"vllm routes: {facts.inventory.summary()}")
        served = route_cases.served_tasks(state.catalogue, facts)
        if not served["generation"]:
            # The one kind of server whose run is mostly "not claimed": said once, at the top.
            lines.append(
                f"vllm serves: {'pooling' if served['pooling'] else 'neither generation nor pooling'}; "
                "no generation route, so no generation contract is claimed"
            )
        if state.connection is not None and state.connection.log_path is not None:
            lines.append(f"vllm serve log: {state.connection.log_path}")
    lines.extend(state.header_notes)
    lines.extend(f"vllm option {line}" for line in options.describe(state.settings, state.option_sources))
    return lines


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None:
        return
    for client in state.clients:
        client.close()
    for target in state.targets:
        if target.connection is not None:
            target.connection.close()
        if target.lock_dir is not None:
            shutil.rmtree(target.lock_dir, ignore_errors=True)
