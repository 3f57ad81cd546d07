"""Scale-out routes (render, derender, token generate) are served or refused as declared.

vLLM 0.30 put them behind --enable-scale-out; 0.30-0.31 refuse with FastAPI's
404, 0.32+ with a 403 stub; before 0.30 they are always live. What a version
does is in the contract data (facts ``scale_out_gate``, ``scale_out_routes``).
"""

import pytest

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.catalogue.route_cases import scale_out_routes
from pytest_vllm_conformance.catalogue.vllm_answers import HANDLER_STATUSES, reached_handler, scale_out_refusal_status
from pytest_vllm_conformance.protocol.error_envelope import error


@pytest.fixture(scope="module")
def scale_out(vllm_expect):
    return vllm_expect.declared("endpoint", "scale_out")


@contract("scale_out.enabled_routes_served")
@each("route", scale_out_routes)
def test_enabled_routes_served(route, scale_out, vllm_client):
    response = route.send(vllm_client)
    assert reached_handler(response), (
        f"scale-out is {scale_out}, but {route} did not reach its handler "
        f"(expected {HANDLER_STATUSES} from the handler): {response.describe()} {response.text[:200]!r}"
    )


@contract("scale_out.disabled_routes_refused")
@each("route", scale_out_routes)
def test_disabled_routes_refused(route, scale_out, vllm_client, vllm_expect):
    gate = vllm_expect.release.scale_out_gate
    response = route.send(vllm_client)
    assert gate["gate"] != "none", f"scale-out is {scale_out}, but {gate['note']}: {response.describe()}"
    expected = scale_out_refusal_status(gate, route.path)
    assert response.status == expected, (
        f"scale-out is {scale_out}: {route} should be refused with {expected} "
        f"as {vllm_expect.version_label} refuses it, got {response.describe()} {response.text[:200]!r}"
    )
    if "refusal_error_type" in gate:
        error_type = error(response).get("type")
        assert error_type == gate["refusal_error_type"], (
            f"{route}: refusal should carry error type {gate['refusal_error_type']!r}, got {error_type!r}"
        )
