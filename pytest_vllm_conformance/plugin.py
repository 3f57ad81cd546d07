"""pytest wiring: options, the run's target, markers, fixtures and hooks.

Everything here delegates; the rooms it connects are ``options``,
``target`` (launcher + discovery), ``contracts``/``profile``/
``expectations`` and ``reporting``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from . import capture, cases, contracts, options, preflight, profile_diff, startup_log
from .client import AsyncBoundedClient, BoundedClient
from .discovery import DiscoveryError, ServerFacts
from .expectations import Expectations
from .launcher import LaunchError, ServerPool
from .serving_profile import Profile, ProfileError, load_profile
from .reporting import PLUGIN_NAME as REPORTER_NAME
from .reporting import ConformanceReporter, Redactor
from .target import NoTarget, Target, client_for, configured, establish

CONTRACT_MARKER = "vllm_contract"
EACH_MARKER = "vllm_each"
NOT_CLAIMED = "not claimed"
WORKER_INPUT_KEY = "vllm_conformance"
# Fixtures that need a server; a run that uses one without a target stops once.
TARGET_FIXTURES = frozenset(
    {"vllm_target", "vllm_facts", "vllm_client", "vllm_async_client", "vllm_expect", "vllm_openai",
     "vllm_ingress_client", "vllm_direct_client"}
)


@dataclass
class RunState:
    settings: options.Settings
    catalogue: contracts.Catalogue
    profile: Profile | None
    redactor: Redactor
    target: Target | None = None
    facts: ServerFacts | None = None
    base_url: str | None = None
    clients: list[BoundedClient] = field(default_factory=list)
    # The embedded server's log, also on xdist workers (which have no target of their own).
    serve_log: str | None = None
    watermark_key: options.Secret | None = None
    baseline: Profile | None = None
    header_notes: list[str] = field(default_factory=list)

    def expectations(self) -> Expectations:
        version = self.facts.parsed_version if self.facts else None
        return Expectations(self.catalogue, version, self.profile, self.baseline)


STATE = pytest.StashKey[RunState]()


def run_state(config: pytest.Config) -> RunState:
    return config.stash[STATE]


def pytest_addoption(parser: pytest.Parser) -> None:
    options.register(parser)


def pytest_configure(config: pytest.Config) -> None:
    catalogue = contracts.load()
    config.addinivalue_line("markers", f"{CONTRACT_MARKER}(id): the catalogue contract this test checks")
    config.addinivalue_line("markers", f"{EACH_MARKER}(argname, source): run the test once per case the source yields")
    config.addinivalue_line("markers", "version_matrix: runs against older vLLM releases (opt-in, slow)")
    for feature, statement in catalogue.features.items():
        config.addinivalue_line("markers", f"{feature}: {statement}")
    settings = options.resolve(config)
    profile = None
    if settings.profile:
        try:
            profile = load_profile(settings.profile)
        except ProfileError as exc:
            raise pytest.UsageError(str(exc)) from None
    redactor = Redactor(settings.secrets())
    watermark_key = _watermark_key(settings, profile)
    for spelling in _key_spellings(watermark_key):
        redactor.add(spelling)
    baseline = _load_baseline(settings.baseline) if settings.baseline else None
    config.stash[STATE] = RunState(
        settings, catalogue, profile, redactor, watermark_key=watermark_key, baseline=baseline
    )
    # Report files, the JUnit finish, the summary, and scrubbing of log records, warnings and headers.
    config.pluginmanager.register(ConformanceReporter(config, config.stash[STATE], NOT_CLAIMED), REPORTER_NAME)


def _load_baseline(path: os.PathLike[str]) -> Profile:
    """--vllm-baseline: a profile file that holds a capture's observed section."""
    try:
        baseline = load_profile(path)
    except ProfileError as exc:
        raise pytest.UsageError(f"--vllm-baseline: {exc}") from None
    if "observed" not in baseline.data:
        raise pytest.UsageError(
            f"--vllm-baseline: profile {path} has no observed section; capture one with --vllm-capture-profile=PATH"
        )
    return baseline


def _watermark_key(settings: options.Settings, profile: Profile | None) -> options.Secret | None:
    """--vllm-watermark-key, else the environment variable the profile's watermark.key_env names."""
    if settings.watermark_key:
        return settings.watermark_key
    variable = profile.get("watermark", "key_env") if profile else None
    value = os.environ.get(variable, "").strip() if variable else ""
    return options.Secret(value) if value else None


def _key_spellings(key: options.Secret | None) -> list[str]:
    """The key as given and as a traceback would print it (decimal, hex), all to be scrubbed."""
    if not key:
        return []
    text = key.reveal()
    try:
        number = int(text, 0)
    except ValueError:
        return [text]
    return [text, str(number), hex(number)]


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
    """Capture and baseline: observe the target once, write the capture and the diff, hand it on in the facts."""
    settings = state.settings
    if not settings.capture_profile and state.baseline is None:
        return
    with client_for(settings, state.base_url) as client:
        observed = capture.observe(client, state.facts, state.catalogue)
    state.facts = dataclasses.replace(state.facts, observed=observed)
    try:
        if settings.capture_profile:
            written = capture.write_profile(settings.capture_profile, observed, state.redactor)
            state.header_notes.append(f"vllm capture: {written}")
        if state.baseline is not None:
            report = settings.diff_report or profile_diff.default_report_path(state.baseline.path)
            written, found = profile_diff.write_report(
                report, state.baseline.data["observed"], str(state.baseline.path), observed, redact=state.redactor
            )
            matter = sum(difference.matters for difference in found)
            state.header_notes.append(
                f"vllm baseline: {state.baseline.path}: {len(found)} difference(s), {matter} that matter for serving; "
                f"diff {written}"
            )
    except OSError as exc:
        raise pytest.UsageError(f"cannot write {exc.filename}: {exc.strerror or exc}") from None


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


# ---- fixtures ---------------------------------------------------------------


@pytest.fixture(scope="session")
def vllm_settings(pytestconfig: pytest.Config) -> options.Settings:
    return run_state(pytestconfig).settings


@pytest.fixture(scope="session")
def vllm_facts(pytestconfig: pytest.Config) -> ServerFacts:
    facts = run_state(pytestconfig).facts
    if facts is None:
        pytest.fail("no vLLM server to test: give --vllm-url=URL, or --vllm-serve=MODEL_DIR", pytrace=False)
    return facts


@pytest.fixture(scope="session")
def vllm_client(pytestconfig: pytest.Config, vllm_facts: ServerFacts) -> BoundedClient:
    state = run_state(pytestconfig)
    client = client_for(state.settings, state.base_url)
    state.clients.append(client)
    return client


@pytest_asyncio.fixture
async def vllm_async_client(pytestconfig: pytest.Config, vllm_facts: ServerFacts):
    state = run_state(pytestconfig)
    settings = state.settings
    client = AsyncBoundedClient(state.base_url, settings.api_key, settings.timeout, settings.max_body)
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def vllm_expect(pytestconfig: pytest.Config, vllm_facts: ServerFacts) -> Expectations:
    return run_state(pytestconfig).expectations()


@pytest.fixture(scope="session")
def vllm_ingress_client(pytestconfig: pytest.Config, vllm_client: BoundedClient) -> BoundedClient:
    """Callers' entry (--vllm-ingress-url); without one the server is its own public entry."""
    state = run_state(pytestconfig)
    ingress = state.settings.ingress_url
    if not ingress or ingress == state.base_url:
        return vllm_client
    client = client_for(state.settings, ingress)
    state.clients.append(client)
    return client


@pytest.fixture(scope="session")
def vllm_direct_client(pytestconfig: pytest.Config, vllm_client: BoundedClient) -> BoundedClient | None:
    """The server itself, bypassing the ingress; None when only --vllm-ingress-url was given."""
    state = run_state(pytestconfig)
    ingress = state.settings.ingress_url
    return None if ingress and ingress == state.base_url else vllm_client


@pytest.fixture(scope="session")
def vllm_watermark_key(pytestconfig: pytest.Config) -> options.Secret | None:
    """The server's watermark key (--vllm-watermark-key, else the profile's watermark.key_env), or None."""
    return run_state(pytestconfig).watermark_key


@pytest.fixture(scope="session")
def vllm_openai(pytestconfig: pytest.Config, vllm_facts: ServerFacts):
    """The official OpenAI SDK pointed at the target, with the run's byte cap and timeout."""
    import openai

    from .client import CappedTransport

    state = run_state(pytestconfig)
    settings = state.settings
    http_client = httpx.Client(transport=CappedTransport(settings.max_body), timeout=settings.timeout, trust_env=False)
    sdk = openai.OpenAI(
        base_url=f"{state.base_url.rstrip('/')}/v1",
        api_key=settings.api_key.reveal() if settings.api_key else "no-key",
        max_retries=0,
        timeout=settings.timeout,
        http_client=http_client,
    )
    yield sdk
    sdk.close()


@pytest.fixture(scope="session")
def vllm_offline_expect(pytestconfig: pytest.Config) -> Expectations:
    """Expectations without requiring a server: the profile, and the server's version facts if there is one, else the newest."""
    return run_state(pytestconfig).expectations()


@pytest.fixture(scope="session")
def vllm_startup_log(pytestconfig: pytest.Config, vllm_offline_expect: Expectations) -> startup_log.StartupLog:
    """The server's log (--vllm-log, else the embedded server's), scanned once for start-up findings."""
    state = run_state(pytestconfig)
    path = state.settings.log or state.serve_log
    if path is None:
        pytest.skip(f"{NOT_CLAIMED}: no vLLM log given (--vllm-log=FILE, or the server the plugin starts with --vllm-serve)")
    kinds = startup_log.finding_kinds(vllm_offline_expect.fact("startup_log_findings"))
    try:
        return startup_log.scan(Path(path), kinds)
    except startup_log.LogUnreadable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def vllm_preflight(pytestconfig: pytest.Config) -> preflight.Linter:
    """The lint rules for --vllm-target-version (else the server's version); needs no server."""
    state = run_state(pytestconfig)
    version = state.settings.target_version or (state.facts.parsed_version if state.facts else None)
    if version is None:
        pytest.skip("no target version to lint for: give --vllm-target-version=X (or a server to read it from)")
    return preflight.Linter(preflight.load_rules(), version)


@pytest.fixture(scope="session")
def vllm_server_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    """Real ``vllm serve`` processes shared by flag set (at most three alive, or VLLM_CONFORMANCE_TEST_MAX_SERVERS).

    Each costs about 2.9 GB: a shared machine may need fewer alive at once.
    """
    max_alive = int(os.environ.get("VLLM_CONFORMANCE_TEST_MAX_SERVERS") or 3)
    pool = ServerPool(max_alive=max_alive, log_dir=tmp_path_factory.mktemp("vllm-logs"))
    yield pool
    pool.close()
