"""pytest wiring: options, markers, the run's target, collection and reporting hooks.

Everything here delegates to the rooms: ``options`` and ``run`` (the run's
configuration), ``target`` (launcher + discovery), ``contracts``/``cases``/
``expectations``, ``capture`` and ``reporting``. The fixtures live in
``plugin/fixtures.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_vllm_conformance import CONTRACT_MARKER, EACH_MARKER, NOT_CLAIMED
from pytest_vllm_conformance.catalogue import cases, contracts, routes
from pytest_vllm_conformance.catalogue.applicability import CLAIMED, UNMEETABLE
from pytest_vllm_conformance.connection.client import display_url
from pytest_vllm_conformance.connection.connect import NO_TARGET, client_for, configured, establish
from pytest_vllm_conformance.connection.discovery import DiscoveryError, ServerFacts
from pytest_vllm_conformance.connection.launcher import LaunchError
from pytest_vllm_conformance.connection.run_lock import RunLock
from pytest_vllm_conformance.features.profile_diff import capture
from pytest_vllm_conformance.plugin import options
from pytest_vllm_conformance.plugin.reporter import PLUGIN_NAME as REPORTER_NAME
from pytest_vllm_conformance.plugin.reporter import ConformanceReporter
from pytest_vllm_conformance.plugin.run import STATE, RunState, configure_run, run_state
from pytest_vllm_conformance.reporting.redaction import scrub_report

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
    state = configure_run(config)
    # Report files, the JUnit finish, the summary, and scrubbing of log records, warnings and headers.
    config.pluginmanager.register(ConformanceReporter(config, state), REPORTER_NAME)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
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
        state.facts = ServerFacts.from_dict(handed_over["facts"])
        state.base_url = handed_over["base_url"]
        state.serve_log = handed_over.get("serve_log")
        state.run_lock = RunLock(Path(handed_over["lock_dir"]))
        return
    if hasattr(config, "workerinput") or not configured(state.settings) or config.option.collectonly:
        return
    try:
        state.target = establish(state.settings, functools.partial(routes.known_routes, state.catalogue))
    except (DiscoveryError, LaunchError) as exc:
        raise pytest.UsageError(state.redactor(str(exc))) from None
    except contracts.ReleaseNotCovered as exc:
        # The first fact discovery asks of a release older than the catalogue: nothing in the run could be judged.
        raise pytest.UsageError(_at_target(state, str(exc))) from None
    state.facts = state.target.facts
    version = state.facts.parsed_version
    if version is not None and state.catalogue.releases.is_older(version):
        raise pytest.UsageError(_at_target(state, state.catalogue.releases.refusal(version)))
    state.base_url = state.target.base_url
    state.serve_log = str(state.target.log_path) if state.target.log_path else None
    _observe_target(state)


def _at_target(state: RunState, problem: str) -> str:
    where = state.settings.url or state.settings.ingress_url
    return state.redactor(f"{display_url(where)}: {problem}" if where else problem)


def _observe_target(state: RunState) -> None:
    """Capture and baseline: observe the target once and hand the observation on in the facts."""
    settings = state.settings
    if not settings.capture_profile and state.baseline is None:
        return
    assert state.facts is not None, "observed after discovery"
    with client_for(settings, state.url) as client:
        try:
            observed, notes = capture.observe_and_record(
                client,
                state.facts,
                state.catalogue,
                capture_path=settings.capture_profile,
                baseline=state.baseline,
                diff_report=settings.diff_report,
                redactor=state.redactor,
                baseline_ignore=state.expectations().declared("profile_diff", "ignore").value,
            )
        except OSError as exc:
            raise pytest.UsageError(f"cannot write {exc.filename}: {exc.strerror or exc}") from None
    state.facts = dataclasses.replace(state.facts, observed=observed)
    state.header_notes.extend(notes)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: hand the discovered target to each worker instead of probing again."""
    state = run_state(node.config)
    if state.facts is not None:
        if state.lock_dir is None:
            state.lock_dir = tempfile.mkdtemp(prefix="vllm-conformance-lock-")
        node.workerinput[WORKER_INPUT_KEY] = {
            "facts": state.facts.to_dict(),
            "base_url": state.base_url,
            "serve_log": state.serve_log,
            "lock_dir": state.lock_dir,
        }


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
    with state.run_lock.shared():
        yield


def _contract_id(node: pytest.Item | pytest.Function) -> str | None:
    marker = node.get_closest_marker(CONTRACT_MARKER)
    return marker.args[0] if marker is not None else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = run_state(metafunc.config)
    contract_id = _contract_id(metafunc.definition)
    claim = state.claim(contract_id) if contract_id else None
    for marker in metafunc.definition.iter_markers(EACH_MARKER):
        argname, source = marker.args
        if claim is not None and not claim.claimed:
            # Decided at collection (pytest_collection_modifyitems): one placeholder case says why.
            metafunc.parametrize(argname, [None], ids=["none"])
            continue
        context = cases.CaseContext(state.facts, state.expectations(), state.settings)
        try:
            values = list(source(context))
        except (cases.NoCases, contracts.NoFact) as exc:
            values, reason = [], str(exc)
        else:
            reason = f"{source.__name__} found nothing to check on this server"
        if values:
            metafunc.parametrize(argname, values, ids=[value.id for value in values])
        else:
            # A claimed contract with nothing to check is an error, never a quiet skip.
            metafunc.parametrize(argname, [pytest.param(None, marks=NO_CASES(reason))], ids=["none"])


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    state = run_state(config)
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
        if state.facts is not None:
            item.user_properties.append(("vllm_version", state.facts.version or "unknown"))
        if state.separate_ingress and state.catalogue.judged_at_ingress(contract):
            item.user_properties.append(("vllm_judged_at", "ingress"))
        claim = state.claim(contract.id)
        if claim.status != CLAIMED:
            # Typed: reporting reads these properties, not the skip message.
            item.user_properties.append(("vllm_claim", claim.status))
            item.user_properties.append(("vllm_claim_reason", claim.reason))
        if claim.status == NOT_CLAIMED:
            item.add_marker(pytest.mark.skip(reason=f"{NOT_CLAIMED}: {claim.reason}"))
        elif claim.unchecked:
            # Claimed, so a plain skip: its feature is partial, the report says what the run lacked.
            item.add_marker(pytest.mark.skip(reason=f"not checked: {claim.unchecked}"))


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
    claim = run_state(item.config).claim(contract_id)
    if claim.status == UNMEETABLE:
        pytest.fail(f"{contract_id}: {claim.reason}", pytrace=False)
    no_cases = item.get_closest_marker(NO_CASES.name)
    if no_cases is not None:
        pytest.fail(
            f"{contract_id} is claimed ({claim.reason}), but there is nothing to check: {no_cases.args[0]}",
            pytrace=False,
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    scrub_report(run_state(item.config).redactor, report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    scrub_report(run_state(collector.config).redactor, report)
    return report


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = run_state(config)
    lines = []
    if state.facts is not None:
        facts = state.facts
        lines.append(
            f"vllm target: {facts.url} ({'embedded server' if state.target and state.target.server else 'given'})"
        )
        lines.append(
            f"vllm version: {facts.version or 'unknown'}; model: {facts.model}; max_model_len: {facts.max_model_len}"
        )
        lines.append(f"vllm release: {state.catalogue.releases.judgement(facts.version, facts.parsed_version)}")
        lines.append(f"vllm expectations: {state.expectations().basis}")
        if facts.inventory is not None:
            lines.append(f"vllm routes: {facts.inventory.summary()}")
        if state.target is not None and state.target.log_path is not None:
            lines.append(f"vllm serve log: {state.target.log_path}")
    lines.extend(state.header_notes)
    lines.extend(f"vllm option {line}" for line in options.describe(state.settings, state.option_sources))
    return lines


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None:
        return
    for client in state.clients:
        client.close()
    if state.target is not None:
        state.target.close()
    if state.lock_dir is not None:
        shutil.rmtree(state.lock_dir, ignore_errors=True)
