"""Anthropic's SDK reads through the run's byte cap: a 300 MB answer is an error after the cap, never a buffer.

The SDK takes an httpx2 client (pydantic's fork of httpx), so the cap is built for it apart from the OpenAI
SDK's (connection/transport.py); the hostile server answers every path with a huge body.
"""

from __future__ import annotations

import pytest

from fixtures.hostile_server import HostileServer
from pytest_vllm_conformance.connection.connect import anthropic_client_for
from pytest_vllm_conformance.connection.secrets import Secret
from pytest_vllm_conformance.connection.settings import Settings

anthropic = pytest.importorskip("anthropic")
CAP = 64 * 1024


def test_a_huge_messages_answer_passes_the_cap_and_is_refused():
    with HostileServer() as hostile:
        settings = Settings(max_body=CAP, timeout=5.0, api_key=Secret("sk-never-printed-1234"))
        sdk = anthropic_client_for(settings, f"{hostile.url}/huge?bytes=300000000&")
        with pytest.raises(anthropic.APIConnectionError) as refused:
            sdk.messages.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
        sdk.close()
    assert f"body passed the {CAP:,}-byte cap" in str(refused.value.__cause__)
