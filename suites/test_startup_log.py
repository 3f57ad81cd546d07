"""The server's start-up log holds nothing the profile fails on; the rest is reported.

Reads ``--vllm-log FILE`` (any vLLM log; no server needed) or the log of the
server the plugin started. One test per kind of finding (the V1 model-runner
fallback, legacy RoPE rewrites, the scale-out-disabled notice, unknown
``VLLM_*`` variables, deprecated entrypoints and flags): a kind listed in
``startup_log.fail_on`` fails, quoting each line with its number; any other
kind passes, and its lines are recorded as JUnit properties
(``vllm_startup_log_<kind>``).
"""

import pytest

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.features.startup_log import startup_log_findings


@contract("startup_log.declared_findings_absent")
@each("finding", startup_log_findings)
def test_declared_findings_absent(finding, vllm_startup_log, vllm_offline_expect, vllm_record):
    fail_on = vllm_offline_expect.declared("startup_log", "fail_on")
    lines = vllm_startup_log.lines(finding)
    for line in lines:
        vllm_record(f"startup_log_{finding}", line.quote(vllm_startup_log.path))
    if lines and finding.kind in fail_on.value:
        pytest.fail(
            f"{finding}: {finding.meaning}, and startup_log.fail_on lists it ({fail_on.basis}):\n"
            f"{vllm_startup_log.quote(finding)}",
            pytrace=False,
        )
