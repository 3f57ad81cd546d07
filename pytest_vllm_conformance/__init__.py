"""pytest-vllm-conformance: conformance suites for live vLLM servers."""

import pytest

__version__ = "0.1.0"

#: The prefix of a skip reason that means "this contract does not apply here"
#: (kept apart from a plain skip in every report).
NOT_CLAIMED = "not claimed"

#: Marks a test with the catalogue contract it checks: ``@contract("auth.guarded_route_accepts_key")``.
contract = pytest.mark.vllm_contract

#: Runs a test once per case a named source yields for this server: ``@each("route", "scale_out_routes")``.
each = pytest.mark.vllm_each

__all__ = ["NOT_CLAIMED", "__version__", "contract", "each"]
