"""pytest wiring: options, markers, the run's target, collection and reporting hooks.

Everything here delegates to the rooms: ``options`` and ``run`` (the run's
configuration), ``target`` (launcher + discovery), ``contracts``/``cases``/
``expectations``, ``capture`` and ``reporting``. The fixtures live in
``plugin_fixtures``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from . import NOT_CLAIMED, capture, cases, contracts, options
from .discovery import DiscoveryError, ServerFacts
from .launcher import LaunchError
from .reporting import PLUGIN_NAME as REPORTER_NAME
from .reporting import ConformanceReporter
from .run import STATE, RunState, configure_run, run_state
from .target import NoTarget, client_for, configured, establish

pytest_plugins = ("pytest_vllm_conformance.plugin_fixtures",)

CONTRACT_MARKER = "vllm_contract"
EACH_MARKER = "vllm_each"
WORKER_INPUT_KEY = "vllm_conformance"
# Fixtures that need a server; a run that uses one without a target stops once.
TARGET_FIXTURES = frozenset(
    {"vllm_target", "vllm_facts", "vllm_client", "vllm_async_client", "vllm_expect", "vllm_openai",
     "vllm_ingress_client", "vllm_direct_client"}
)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.register(parser)


def pytest_configure(config: pytest.Config) -> None:
    catalogue = contracts.load()
    config.addinivalue_line("markers", f"{CONTRACT_MARKER}(id): the catalogue contract this test checks")
    config.addinivalue_line("markers", f"{EACH_MARKER}(argname, source): run the test once per case the source yields")
    config.addinivalue_line("markers", "version_matrix: runs against older vLLM releases (opt-in, slow)")
    for feature, statement in catalogue.features.items():
        config.addinivalue_line("markers", f"{feature}: {statement}")
    state = configure_run(config)
    # Report files, the JUnit finish, the summary, and scrubbing of log records, warnings and headers.
    config.pluginmanager.register(ConformanceReporter(config, state, NOT_CLAIMED), REPORTER_NAME)


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
        return
    if hasattr(config, "workerinput") or not configured(state.settings) or config.option.collectonly:
        return
    try:
        state.target = establish(state.settings)
    except (DiscoveryError, LaunchError) as exc:
        raise pytest.UsageError(state.redactor(str(exc))) from None
    state.facts = state.target.facts
    state.base_url = state.target.base_url
    state.serve_log = str(state.target.log_path) if state.target.log_path else None
    _observe_target(state)


def _observe_target(state: RunState) -> None:
    """Capture and baseline: observe the target once and hand the observation on in the facts."""
    settings = state.settings
    if not settings.capture_profile and state.baseline is None:
        return
    with client_for(settings, state.base_url) as client:
        try:
            observed, notes = capture.observe_and_record(
                client,
                state.facts,
                state.catalogue,
                capture_path=settings.capture_profile,
                baseline=state.baseline,
                diff_report=settings.diff_report,
                redactor=state.redactor,
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
        node.workerinput[WORKER_INPUT_KEY] = {
            "facts": state.facts.to_dict(), "base_url": state.base_url, "serve_log": state.serve_log
        }


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = run_state(metafunc.config)
    for marker in metafunc.definition.iter_markers(EACH_MARKER):
        argname, source = marker.args
        reason = f"{NOT_CLAIMED}: this server has no {source.replace('_', ' ')}"
        try:
            values = cases.build(source, state.facts, state.expectations(), state.settings)
        except cases.NoCases as exc:
            values, reason = [], str(exc)
        except contracts.NoFact as exc:
            # A release the data does not describe: say so instead of breaking collection.
            values, reason = [], f"{NOT_CLAIMED}: {exc}"
        if values:
            metafunc.parametrize(argname, values, ids=[value.id for value in values])
        else:
            metafunc.parametrize(argname, [pytest.param(None, marks=pytest.mark.skip(reason=reason))], ids=["none"])


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    state = run_state(config)
    for item in items:
        marker = item.get_closest_marker(CONTRACT_MARKER)
        if marker is not None:
            try:
                contract = state.catalogue.contract(marker.args[0])
            except contracts.UnknownContract as exc:
                raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
            item.add_marker(contract.feature)
            item.user_properties.append(("vllm_contract", contract.id))
            item.user_properties.append(("vllm_feature", contract.feature))
            if state.facts is not None:
                item.user_properties.append(("vllm_version", state.facts.version or "unknown"))


def pytest_collection_finish(session: pytest.Session) -> None:
    # After -m/-k deselection: `-m preflight` needs no server even though other suites were collected.
    config = session.config
    state = run_state(config)
    needs_target = any(TARGET_FIXTURES.intersection(getattr(item, "fixturenames", ())) for item in session.items)
    if needs_target and state.facts is None and not config.option.collectonly and not hasattr(config, "workerinput"):
        raise pytest.UsageError(str(NoTarget("no vLLM server to test: give --vllm-url=URL, or --vllm-serve=MODEL_DIR to start one")))


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker(CONTRACT_MARKER)
    state = run_state(item.config)
    if marker is None or state.facts is None:
        return
    contract = state.catalogue.contract(marker.args[0])
    version = state.facts.parsed_version
    if not contract.applies_to(version):
        pytest.skip(f"{NOT_CLAIMED}: {contract.id} applies to vLLM {contract.versions}, the server is {version}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    run_state(item.config).redactor.scrub_report(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    run_state(collector.config).redactor.scrub_report(outcome.get_result())


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = run_state(config)
    lines = []
    if state.facts is not None:
        facts = state.facts
        lines.append(f"vllm target: {facts.url} ({'embedded server' if state.target and state.target.server else 'given'})")
        lines.append(f"vllm version: {facts.version or 'unknown'}; model: {facts.model}; max_model_len: {facts.max_model_len}")
        lines.append(f"vllm expectations: {state.expectations().basis}")
        if state.target is not None and state.target.log_path is not None:
            lines.append(f"vllm serve log: {state.target.log_path}")
    lines.extend(state.header_notes)
    lines.extend(f"vllm option {line}" for line in state.settings.describe())
    return lines


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None:
        return
    for client in state.clients:
        client.close()
    if state.target is not None:
        state.target.close()
