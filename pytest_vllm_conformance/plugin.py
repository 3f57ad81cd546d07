"""pytest wiring: options, the run's target, markers, fixtures and hooks.

Everything here delegates; the rooms it connects are ``options``,
``target`` (launcher + discovery), ``contracts``/``profile``/
``expectations`` and ``reporting``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import pytest_asyncio

from . import cases, contracts, options
from .client import AsyncBoundedClient, BoundedClient
from .discovery import DiscoveryError, ServerFacts
from .expectations import Expectations
from .launcher import LaunchError, ServerPool
from .serving_profile import Profile, ProfileError, load_profile
from .reporting import Redactor
from .target import NoTarget, Target, client_for, configured, establish

CONTRACT_MARKER = "vllm_contract"
EACH_MARKER = "vllm_each"
NOT_CLAIMED = "not claimed"
WORKER_INPUT_KEY = "vllm_conformance"
# Fixtures that need a server; a run that uses one without a target stops once.
TARGET_FIXTURES = frozenset(
    {"vllm_target", "vllm_facts", "vllm_client", "vllm_async_client", "vllm_expect", "vllm_openai"}
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

    def expectations(self) -> Expectations:
        version = self.facts.parsed_version if self.facts else None
        return Expectations(self.catalogue, version, self.profile)


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
    config.stash[STATE] = RunState(settings, catalogue, profile, Redactor(settings.secrets()))


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
        return
    if hasattr(config, "workerinput") or not configured(state.settings) or config.option.collectonly:
        return
    try:
        state.target = establish(state.settings)
    except (DiscoveryError, LaunchError) as exc:
        raise pytest.UsageError(state.redactor(str(exc))) from None
    state.facts = state.target.facts
    state.base_url = state.target.base_url


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: hand the discovered target to each worker instead of probing again."""
    state = run_state(node.config)
    if state.facts is not None:
        node.workerinput[WORKER_INPUT_KEY] = {"facts": state.facts.to_dict(), "base_url": state.base_url}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = run_state(metafunc.config)
    for marker in metafunc.definition.iter_markers(EACH_MARKER):
        argname, source = marker.args
        values = cases.build(source, state.facts, state.expectations())
        if values:
            metafunc.parametrize(argname, values, ids=[value.id for value in values])
        else:
            reason = f"{NOT_CLAIMED}: this server has no {source.replace('_', ' ')}"
            metafunc.parametrize(argname, [pytest.param(None, marks=pytest.mark.skip(reason=reason))], ids=["none"])


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    state = run_state(config)
    needs_target = False
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
        needs_target = needs_target or bool(TARGET_FIXTURES.intersection(getattr(item, "fixturenames", ())))
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
def vllm_server_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    """Real ``vllm serve`` processes shared by flag set (at most three alive)."""
    pool = ServerPool(max_alive=3, log_dir=tmp_path_factory.mktemp("vllm-logs"))
    yield pool
    pool.close()
