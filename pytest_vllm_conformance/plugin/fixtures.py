"""The plugin's fixtures, every suite's: the target and its facts, its clients (ours, the OpenAI and Anthropic
SDKs, the ingress's), the expectations, the run's inputs (settings, the log, the watermark key, the version a
server-less suite judges for), and how a test records evidence and properties.

Registered by ``plugin/hooks.py`` (``pytest_plugins``). Each reads the run's state (``run.run_state``); none
decides pass or fail. A fixture only one feature uses is defined in that feature's test module instead
(``suites/<feature>/test_<feature>.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio
from packaging.version import Version

from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.connection.connect import (
    NO_TARGET,
    anthropic_client_for,
    async_client_for,
    client_for,
    ingress_key,
    sdk_client_for,
    target_key,
)
from pytest_vllm_conformance.connection.discovery import ServerFacts
from pytest_vllm_conformance.connection.ingress import (
    Ask,
    IngressExposure,
    declared_hidden,
    not_exposed_line,
    undeclared_hidden_line,
)
from pytest_vllm_conformance.connection.launcher import StartClocks, VllmServer
from pytest_vllm_conformance.connection.secrets import Secret
from pytest_vllm_conformance.connection.settings import Settings
from pytest_vllm_conformance.observed.replicas import Fleet, Member
from pytest_vllm_conformance.plugin.progress import Progress
from pytest_vllm_conformance.plugin.run import TargetState, run_state
from pytest_vllm_conformance.plugin.verdicts import evidence_of
from pytest_vllm_conformance.reporting.evidence import Evidence


@pytest.fixture(scope="session")
def vllm_settings(pytestconfig: pytest.Config) -> Settings:
    return run_state(pytestconfig).settings


@pytest.fixture(scope="session")
def vllm_target(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> TargetState:
    """The target a test runs against: in a fleet, the replica it is parametrized with (``[NAME-...]``)."""
    state = run_state(pytestconfig)
    name = getattr(request, "param", None)
    return state.replica(name) if isinstance(name, str) and state.fleet else state.primary


@pytest.fixture(scope="session")
def vllm_facts(vllm_target: TargetState) -> ServerFacts:
    facts = vllm_target.facts
    if facts is None:
        pytest.fail(vllm_target.problem or NO_TARGET, pytrace=False)
    return facts


def _url(target: TargetState) -> str:
    if target.base_url is None:
        raise RuntimeError("the run has no target yet")
    return target.base_url


@pytest.fixture(scope="session")
def vllm_client(pytestconfig: pytest.Config, vllm_target: TargetState, vllm_facts: ServerFacts) -> BoundedClient:
    state = run_state(pytestconfig)
    client = client_for(state.settings, _url(vllm_target), target_key(state.settings))
    state.clients.append(client)
    return client


@pytest_asyncio.fixture
async def vllm_async_client(pytestconfig: pytest.Config, vllm_target: TargetState, vllm_facts: ServerFacts):
    state = run_state(pytestconfig)
    settings = state.settings
    client = async_client_for(settings, _url(vllm_target))
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def vllm_expect(pytestconfig: pytest.Config, vllm_target: TargetState, vllm_facts: ServerFacts) -> Expectations:
    return run_state(pytestconfig).expectations(vllm_target)


@pytest.fixture(scope="session")
def vllm_fleet(pytestconfig: pytest.Config) -> Fleet:
    """Every replica of the run by name: its observation (the capture) or why it was not reached."""
    state = run_state(pytestconfig)
    return Fleet(
        tuple(
            Member(target.name, target.facts.observed if target.facts else None, target.problem)
            for target in state.targets
        )
    )


@pytest.fixture(scope="session")
def vllm_ingress_client(
    pytestconfig: pytest.Config, vllm_target: TargetState, vllm_client: BoundedClient
) -> BoundedClient:
    """Callers' entry (--vllm-ingress-url); without one the server is its own public entry."""
    state = run_state(pytestconfig)
    ingress = state.settings.ingress_url
    if not ingress or ingress == vllm_target.base_url:
        return vllm_client
    client = client_for(state.settings, ingress, ingress_key(state.settings))
    state.clients.append(client)
    return client


@pytest.fixture(scope="session")
def vllm_direct_client(
    pytestconfig: pytest.Config, vllm_target: TargetState, vllm_client: BoundedClient
) -> BoundedClient | None:
    """The server itself, bypassing the ingress; None when only --vllm-ingress-url was given."""
    state = run_state(pytestconfig)
    ingress = state.settings.ingress_url
    return None if ingress and ingress == vllm_target.base_url else vllm_client


@pytest.fixture(scope="session")
def vllm_ingress_exposure(vllm_ingress_client: BoundedClient, vllm_direct_client: BoundedClient | None):
    return IngressExposure(vllm_ingress_client, vllm_direct_client)


@pytest.fixture
def vllm_not_exposed(
    vllm_ingress_exposure: IngressExposure, vllm_offline_expect: Expectations, vllm_record, vllm_evidence: Evidence
):
    """``vllm_not_exposed(what, ask, through_ingress=None, report=True)``: the ingress does not expose ``what``.

    ``ask(client)`` sends the request ``what`` names to ``client``; the
    ingress's own 404/405 where the server answers otherwise (connection/ingress.py)
    on a route the profile declares hidden (``ingress.hidden_routes``) is
    recorded as the property ``vllm_ingress_exposure: not exposed`` and,
    with ``report``, a line in the report. On a route it does not declare
    hidden, the check fails here, naming the route. Only with both
    --vllm-ingress-url and --vllm-url: the server's answer is the witness.
    """
    declared = vllm_offline_expect.declared("ingress", "hidden_routes")

    def not_exposed(what: str, ask: Ask, through_ingress=None, report: bool = True) -> bool:
        status = vllm_ingress_exposure.hiding_status(what, ask, through_ingress)
        if status is None:
            return False
        route = vllm_ingress_exposure.hidden_route(what)
        if not declared_hidden(route, declared.value or ()):
            pytest.fail(undeclared_hidden_line(what, route, status, str(declared)), pytrace=False)
        # What was judged: the route, hidden as declared (its answers may have come in an earlier check's call).
        vllm_evidence.judged(1, "declared hidden routes")
        vllm_record("ingress_exposure", "not exposed")
        vllm_record("ingress_hidden", what)
        if report:
            vllm_record("figures", not_exposed_line(what, status))
        return True

    return not_exposed


@pytest.fixture
def vllm_record(request: pytest.FixtureRequest):
    """``vllm_record(name, value)``: a JUnit property of this test, always ``vllm_``-prefixed.

    Appended to the test's user properties as pytest's ``record_property``
    does, without its warning under JUnit xunit2 (the plugin moves them into
    ``<system-out>`` there).
    """

    def record(name: str, value: object) -> None:
        request.node.user_properties.append((name if name.startswith("vllm_") else f"vllm_{name}", value))

    return record


@pytest.fixture
def vllm_evidence(request: pytest.FixtureRequest) -> Evidence:
    """``vllm_evidence.judged(128, "requests", missing="no request completed")``: what this check judged.

    A contract test that passes with none of its evidence (a count of 0, or
    nothing recorded and no answer received) is reported *undecided*, naming
    what was missing; its report line and JUnit property carry the rest
    ("judged: 2 objectives, 128 requests").
    """
    return evidence_of(request.node)


@pytest.fixture(scope="session")
def vllm_progress(pytestconfig: pytest.Config) -> Progress:
    """Progress lines for a phase long enough to look hung: ``vllm_progress.phase(name)(status)``, called often."""
    return run_state(pytestconfig).progress


@pytest.fixture(scope="session")
def vllm_exclusive(vllm_target: TargetState):
    """``with vllm_exclusive():`` no other test (on any xdist worker) talks to the server meanwhile."""
    return vllm_target.run_lock.exclusive


@pytest.fixture(scope="session")
def vllm_managed_server(pytestconfig: pytest.Config, vllm_facts: ServerFacts) -> VllmServer | None:
    """The server the plugin started (--vllm-serve), in the process that owns it; None where no process of the run
    owns one (a server given by URL, or an xdist worker: the controlling process started it)."""
    connection = run_state(pytestconfig).connection
    return connection.server if connection is not None else None


@pytest.fixture(scope="session")
def vllm_start_clocks(pytestconfig: pytest.Config) -> tuple[StartClocks, ...]:
    """How each start of the server the plugin started (--vllm-serve) reached readiness, timed by the launcher as
    it started: /health 200, /v1/models listing the model, a first token, in seconds from the spawn. In start
    order, the tested server's last (--vllm-serve-second-start makes two); none where the run started no server
    (a server given by URL). Read on xdist workers too: they are handed the clocks."""
    return run_state(pytestconfig).start_clocks


@pytest.fixture(scope="session")
def vllm_watermark_key(pytestconfig: pytest.Config) -> Secret | None:
    """The server's watermark key (--vllm-watermark-key, else the profile's watermark.key_env), or None."""
    return run_state(pytestconfig).watermark_key


@pytest.fixture(scope="session")
def vllm_openai(pytestconfig: pytest.Config, vllm_target: TargetState, vllm_facts: ServerFacts):
    """The official OpenAI SDK pointed at the target, with the run's byte cap and timeout."""
    yield from _sdk_for_the_session(pytestconfig, vllm_target, sdk_client_for)


@pytest.fixture(scope="session")
def vllm_anthropic(pytestconfig: pytest.Config, vllm_target: TargetState, vllm_facts: ServerFacts):
    """Anthropic's official SDK pointed at the target, with the run's byte cap and timeout."""
    yield from _sdk_for_the_session(pytestconfig, vllm_target, anthropic_client_for)


def _sdk_for_the_session(pytestconfig: pytest.Config, target: TargetState, client_for):
    """The SDK client ``client_for(settings, url)`` makes for the target, closed when the session ends."""
    sdk = client_for(run_state(pytestconfig).settings, _url(target))
    yield sdk
    sdk.close()


@pytest.fixture(scope="session")
def vllm_offline_expect(pytestconfig: pytest.Config) -> Expectations:
    """Expectations without requiring a server: the profile, and the server's version facts (else the newest)."""
    return run_state(pytestconfig).expectations()


@pytest.fixture(scope="session")
def vllm_log_path(pytestconfig: pytest.Config) -> Path | None:
    """The server's log (--vllm-log, else the embedded server's), or None: for reading an engine's error, or the
    start-up log the startup_log suite judges."""
    state = run_state(pytestconfig)
    path = state.settings.log or state.serve_log
    return Path(path) if path else None


@pytest.fixture(scope="session")
def vllm_target_version(pytestconfig: pytest.Config) -> Version | None:
    """The vLLM version the suites that need no server judge for (preflight, checkpoint): --vllm-target-version,
    else the server's, else None."""
    state = run_state(pytestconfig)
    return state.settings.target_version or (state.facts.parsed_version if state.facts else None)
