"""The stand-in contract tests the reporting tests run: real catalogue contracts, no server."""

import yaml

# One test per outcome, spread so that each feature verdict shows up:
# discovery all passed (success), auth one failure (failure), validation_bounds
# a skip beside a pass (partial), scale_out only not-claimed (not claimed: the
# plugin decides that before the test runs, from the newest release's default
# "scale-out disabled", since no server is known here).
STAND_INS = """
    import pytest
    from pytest_vllm_conformance import contract

    @contract("discovery.max_model_len_published")
    def test_health(vllm_evidence):
        vllm_evidence.judged(1, "stand-in checks")

    @contract("discovery.version_parses")
    def test_version(vllm_evidence):
        vllm_evidence.judged(1, "stand-in checks")

    @contract("auth.guarded_route_accepts_key")
    @pytest.mark.parametrize("route", ["GET /v1/models", "POST /v1/completions"])
    def test_accepts_key(route, vllm_evidence):
        vllm_evidence.judged(1, "stand-in checks")
        assert route != "POST /v1/completions", f"{route} refused the right key: 401"

    @contract("auth.guarded_route_refuses_missing_key")
    def test_refuses_missing_key(vllm_evidence):
        vllm_evidence.judged(1, "stand-in checks")

    @contract("validation_bounds.error_body_bounded")
    def test_bounded(vllm_evidence):
        vllm_evidence.judged(1, "stand-in checks")

    @contract("validation_bounds.answered_fast")
    def test_fast():
        pytest.skip("no malformed request could be built for this server")

    @contract("scale_out.enabled_routes_served")
    @pytest.mark.parametrize("route", ["a", "b"])
    def test_served(route):
        raise AssertionError("a contract that is not claimed never runs")

    def test_not_a_contract():
        pass
"""


SCALE_OUT_OFF = "endpoint.scale_out is disabled (vLLM (version unknown: newest known rules) default)"


def read_report(path):
    return yaml.safe_load(path.read_text())
