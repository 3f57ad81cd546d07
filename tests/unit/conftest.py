"""Fixtures the unit tests share."""

import pytest

from pytest_vllm_conformance.plugin.run import CI_RUN_IDS


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("VLLM_URL", "VLLM_CONFORMANCE_REPORT", "VLLM_CONFORMANCE_PROFILE", "VLLM_CONFORMANCE_SHARD_RUN"):
        monkeypatch.delenv(name, raising=False)
    # A CI's run id would join every shard's declaration (plugin/run.py CI_RUN_IDS): the tests set their own.
    for variable, attempt in CI_RUN_IDS:
        monkeypatch.delenv(variable, raising=False)
        if attempt:
            monkeypatch.delenv(attempt, raising=False)
    # The auth stand-ins' contracts need a key to be checked; without one the harness skips them.
    monkeypatch.setenv("VLLM_API_KEY", "stand-in-key")
    return monkeypatch
