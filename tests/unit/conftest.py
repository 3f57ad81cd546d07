"""Fixtures the unit tests share."""

import pytest


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("VLLM_URL", "VLLM_CONFORMANCE_REPORT", "VLLM_CONFORMANCE_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    # The auth stand-ins' contracts need a key to be checked; without one the harness skips them.
    monkeypatch.setenv("VLLM_API_KEY", "stand-in-key")
    return monkeypatch
