"""Which servers each group of server tests uses, and in what order the groups run.

Server tests run in groups that share servers (at most three alive). While a
group runs, the servers of the groups after it start in the free slots
(``tests/conftest.py``'s ``pytest_runtest_call``), nearest group first, so a
start is hidden behind the tests before it; the pool only stops a server no
group up to there needs. ``tests/unit/test_schedule.py`` fails when an entry
names no test, or a server test is in no group.
"""

from __future__ import annotations

from dataclasses import dataclass

# The one test that starts a server of its own (the plugin's embedded server): it takes one of the
# three slots while it runs.
EMBEDDED_SERVER_TEST = (
    "integration/test_reports_on_real_vllm.py::test_embedded_server_is_started_stopped_and_never_holds_the_key"
)


@dataclass(frozen=True)
class Group:
    tests: str  # a module or a test below tests/; a test's own entry wins over its module's
    servers: tuple[str, ...]  # names of tests/support/servers.py's specs


# In the order they run. The order is chosen so that a server is started once, every group that measures latency
# finds its servers already up, and each server starts while a group that leaves a slot free runs for at least a
# server's start (about 30 s beside the tests) before the group that needs it. The embedded server's test runs first,
# on an empty pool; the quiet tests (QUIET_TESTS) come early, while the servers they need are the ones already up.
GROUPS: tuple[Group, ...] = (
    Group(EMBEDDED_SERVER_TEST, ()),
    Group("integration/test_suites_on_real_vllm.py", ("plain", "hardened")),
    # The bounded server starts beside them.
    Group("faults/test_endpoint_faults.py", ("plain", "hardened")),
    Group("integration/test_operational_suites.py", ("plain", "bounded")),
    # The serving module's CI test (the others are opt-in): plain's engine paused and resumed.
    Group(
        "integration/test_serving_on_real_vllm.py::"
        "test_an_engine_paused_behind_a_healthy_api_server_fails_progress_while_healthy",
        ("plain",),
    ),
    # The short_context server starts beside the report tests, the reasoning server beside the target faults.
    Group("integration/test_reports_on_real_vllm.py", ("hardened",)),
    Group("faults/test_target_faults.py", ("plain",)),
    # Opt-in (make test-serving): loads the plain server; the one_seq server starts beside the target faults.
    Group("integration/test_serving_on_real_vllm.py", ("plain", "one_seq")),
    Group("faults/test_context_faults.py", ("plain", "short_context")),
    # Apart from its module: unbounded_embeds is the short_context server (tests/support/servers.py).
    Group(
        "faults/test_endpoint_faults.py::test_an_unbounded_prompt_embeds_decoder_fails_embedding_limits",
        ("short_context",),
    ),
    # Two replicas, one with another --max-model-len: the servers the context faults just used.
    Group("integration/test_fleet_on_real_vllm.py", ("plain", "short_context")),
    # The reasoning server: the reasoning, rendering and accounting suites on it, and the fault proxy in front.
    Group("integration/test_reasoning_on_real_vllm.py", ("reasoning",)),
    # The perturbed server starts beside the reasoning tests; the self-test, first, needs only plain (a minute and
    # a half), so the retemplated server starts beside it too.
    Group("integration/test_quality_on_real_vllm.py", ("plain", "perturbed")),
    # bfloat16 is the retemplated server (tests/support/servers.py), which the rendering tests use next.
    Group("integration/test_logprob_drift_on_real_vllm.py", ("plain", "perturbed", "retemplated")),
    Group("integration/test_rendering_on_real_vllm.py", ("plain", "retemplated")),
    # Plain alone for about a minute and a half: the generation and padding servers start beside them.
    Group("integration/test_wire_on_real_vllm.py", ("plain",)),
    Group("faults/test_wire_faults.py", ("plain",)),
    Group("integration/test_generation_controls.py", ("plain", "generation")),
    Group("faults/test_generation_faults.py", ("generation",)),
    # The padding model's runs, apart from their modules; the yarn server starts beside them.
    Group(
        "integration/test_generation_controls.py::test_a_model_padding_its_json_is_undecided_never_failed",
        ("padding",),
    ),
    Group("faults/test_generation_faults.py::test_a_dropped_constraint_fails_where_the_model_pads", ("padding",)),
    Group("faults/test_generation_faults.py::test_a_dropped_tool_choice_fails_where_the_model_pads", ("padding",)),
    Group("integration/test_context_and_profiles.py", ("plain", "yarn")),
    # Opt-in (make test-extended): apart from its module, beside the yarn server the context tests use.
    Group(
        "integration/test_logprob_drift_on_real_vllm.py::test_a_wrong_yarn_factor_fails_drift_bucket_by_bucket",
        ("yarn", "yarn_factor2"),
    ),
    # Needs no server (the watermark detectors against vLLM's own code): the watermark server starts beside it.
    Group("integration/test_watermark_crosscheck.py", ()),
    Group("integration/test_watermark_on_real_vllm.py", ("watermark",)),
    Group("faults/test_watermark_faults.py", ("watermark",)),
    # Opt-in (make test-fleet): two replicas behind nginx.
    Group("integration/test_fleet_entry_behind_nginx.py", ("replica_a", "replica_b")),
    # Opt-in, each with a venv of its own (make test-matrix, make test-gateways).
    Group("integration/test_version_matrix.py", ()),
    Group("integration/test_litellm_gateway.py", ()),
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
    """The index in GROUPS of the entry naming the test most closely (a test before its module), or None."""
    nodeid = below_tests(nodeid)
    matches = [(len(group.tests), index) for index, group in enumerate(GROUPS) if under(nodeid, group.tests)]
    return max(matches)[1] if matches else None


def is_quiet(nodeid: str) -> bool:
    return any(under(below_tests(nodeid), prefix) for prefix in QUIET_TESTS)


def servers_of(group: int) -> tuple[str, ...]:
    return GROUPS[group].servers if 0 <= group < len(GROUPS) else ()


def servers_wanted_soonest(group: int, later: list[int], room: int) -> list[str]:
    """The group's servers, then those of the groups after it in order, up to ``room`` servers.

    It stops at the first server that does not fit: a nearer group's server
    is never passed over for a farther one's.
    """
    names = list(servers_of(group))
    for upcoming in later:
        for name in servers_of(upcoming):
            if name not in names:
                if len(names) >= room:
                    return names
                names.append(name)
    return names
