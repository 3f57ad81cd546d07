"""pytest-vllm-conformance: conformance suites for live vLLM servers."""

import pytest

__version__ = "0.1.0"

#: Marks a test with the catalogue contract it checks: ``@contract("auth.guarded_route_accepts_key")``.
contract = pytest.mark.vllm_contract

__all__ = ["__version__", "contract"]
