"""In what order the groups of server tests run; each test module declares the servers it uses.

A test declares the pool's servers it uses with ``@pytest.mark.servers("plain",
"hardened")`` (its module's ``pytestmark``, or the test's own, which wins).
Server tests run in groups that share servers (at most three alive): a group
is an entry of ``ORDER`` (a module, or a single test whose entry wins over its
module's), and its servers are those its tests declare. While a group runs,
the servers of the groups after it start in the free slots
(``tests/conftest.py``'s ``pytest_runtest_call``), nearest group first, so a
start is hidden behind the tests before it; the pool only stops a server no
group up to there needs. ``tests/unit/test_schedule.py`` fails when an entry
names no test, a server test is in no group or declares no servers, or a
group needs more servers than the pool keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

# The one test that starts a server of its own (the plugin's embedded server): it takes one of the
# three slots while it runs.
EMBEDDED_SERVER_TEST = (
    "integration/test_reports_on_real_vllm.py::test_embedded_server_is_started_stopped_and_never_holds_the_key"
)
# The marker a server test declares its servers with (names of fixtures/server_specs.py's specs).
SERVERS_MARKER = "servers"

# In the order they run. The order is chosen so that a server is started once, every group that measures latency
# finds its servers already up, and each server starts while a group that leaves a slot free runs for at least a
# server's start (about 30 s beside the tests) before the group that needs it. The embedded server's test runs first,
# on an empty pool; the quiet tests (QUIET_TESTS) come early, while the servers they need are the ones already up.
ORDER: tuple[str, ...] = (
    EMBEDDED_SERVER_TEST,
    "integration/test_suites_on_real_vllm.py",
    # The bounded server starts beside them.
    "faults/test_endpoint_faults.py",
    "integration/test_operational_suites.py",
    # The serving module's CI test (the others are opt-in): plain's engine paused and resumed.
    "integration/test_serving_on_real_vllm.py::"
    "test_an_engine_paused_behind_a_healthy_api_server_fails_progress_while_healthy",
    # The one_seq server starts beside the report tests, the short_context server beside the target faults.
    "integration/test_reports_on_real_vllm.py",
    "faults/test_target_faults.py",
    # Quiet: loads plain and one_seq (which is also the compiled start whose log the start-up proof reads).
    "integration/test_serving_on_real_vllm.py",
    # Plain behind the fault proxy: tiny workloads, faults far outside the noise.
    "faults/test_serving_faults.py",
    # The reasoning server starts beside the context faults and the fleet.
    "faults/test_context_faults.py",
    # Apart from its module: unbounded_embeds is the short_context server (fixtures/server_specs.py).
    "faults/test_endpoint_faults.py::test_an_unbounded_prompt_embeds_decoder_fails_embedding_limits",
    # Two replicas, one with another --max-model-len: the servers the context faults just used.
    "integration/test_fleet_on_real_vllm.py",
    # The reasoning server: the reasoning, rendering and accounting suites on it, and the fault proxy in front.
    "integration/test_reasoning_on_real_vllm.py",
    # The perturbed server starts beside the reasoning tests; the self-test, first, needs only plain (about a
    # minute), so the retemplated server starts beside it too.
    "integration/test_quality_on_real_vllm.py",
    # bfloat16 is the retemplated server (fixtures/server_specs.py), which the rendering tests use next.
    "integration/test_logprob_drift_on_real_vllm.py",
    "integration/test_rendering_on_real_vllm.py",
    # Plain alone for about a minute and a half: the generation and padding servers start beside them.
    "integration/test_wire_on_real_vllm.py",
    "faults/test_wire_faults.py",
    "faults/test_sampling_faults.py",
    "integration/test_generation_controls.py",
    "faults/test_generation_faults.py",
    # The generation server still up: the agent loops on it, then broken in front of it.
    "integration/test_agent_loops_on_real_vllm.py",
    "faults/test_agent_loop_faults.py",
    # The padding model's runs, apart from their modules; the yarn server starts beside them.
    "integration/test_generation_controls.py::test_a_model_padding_its_json_is_undecided_never_failed",
    "faults/test_generation_faults.py::test_a_dropped_constraint_fails_where_the_model_pads",
    "faults/test_generation_faults.py::test_a_dropped_tool_choice_fails_where_the_model_pads",
    "integration/test_context_and_profiles.py",
    # Opt-in (make test-extended): apart from its module, beside the yarn server the context tests use.
    "integration/test_logprob_drift_on_real_vllm.py::test_a_wrong_yarn_factor_fails_drift_bucket_by_bucket",
    # Needs no server (the watermark detectors against vLLM's own code): the watermark server starts beside it.
    "integration/test_watermark_crosscheck.py",
    "integration/test_watermark_on_real_vllm.py",
    "faults/test_watermark_faults.py",
    # Opt-in (make test-fleet): two replicas behind nginx.
    "integration/test_fleet_entry_behind_nginx.py",
    # Opt-in, each with a venv of its own (make test-matrix, make test-gateways).
    "integration/test_version_matrix.py",
    "integration/test_litellm_gateway.py",
)

# Tests whose verdicts depend on the server's speed (whole-suite runs pinned verdict by verdict, which include
# validation_bounds.answered_fast; admission timing its refusals): they run alone on the machine
# with no server starting beside them. (The xdist comparison is not one: its markers hold no timed check.)
QUIET_TESTS = (
    "integration/test_suites_on_real_vllm.py",
    "integration/test_operational_suites.py",
    "integration/test_serving_on_real_vllm.py",
)


def under(nodeid: str, prefix: str) -> bool:
    return nodeid == prefix or nodeid.startswith((prefix + "::", prefix + "["))


def below_tests(nodeid: str) -> str:
    """A node id below tests/, as the groups and QUIET_TESTS name it."""
    return nodeid.split("tests/", 1)[-1]


def group_of(nodeid: str) -> int | None:
    """The index in ORDER of the entry naming the test most closely (a test before its module), or None."""
    nodeid = below_tests(nodeid)
    matches = [(len(entry), index) for index, entry in enumerate(ORDER) if under(nodeid, entry)]
    return max(matches)[1] if matches else None


def is_quiet(nodeid: str) -> bool:
    return any(under(below_tests(nodeid), prefix) for prefix in QUIET_TESTS)


def servers_by_group(declared: Iterable[tuple[int, Sequence[str]]]) -> dict[int, tuple[str, ...]]:
    """Each group's servers: what its tests declare, (group, servers) per test, in the order first declared."""
    found: dict[int, dict[str, None]] = {}
    for group, names in declared:
        found.setdefault(group, {}).update(dict.fromkeys(names))
    return {group: tuple(names) for group, names in found.items()}


def servers_wanted_soonest(
    servers: Mapping[int, Sequence[str]],
    group: int,
    later: Sequence[int],
    room: int,
    same_server: Callable[[str], Hashable] = lambda name: name,
) -> list[str]:
    """The group's servers, then those of the groups after it in order, up to ``room`` servers.

    It stops at the first server that does not fit: a nearer group's server
    is never passed over for a farther one's. ``same_server`` maps a name to
    the server it starts: two names of one server take one slot.
    """
    names = list(servers.get(group, ()))
    started = {same_server(name) for name in names}
    for upcoming in later:
        for name in servers.get(upcoming, ()):
            if same_server(name) not in started:
                if len(started) >= room:
                    return names
                started.add(same_server(name))
                names.append(name)
    return names
