"""The live baseline (``--vllm-baseline-url``): a second server the same requests go to, connected one way for
every feature that compares against it (quality, serving)."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.connection.connect import client_for
from pytest_vllm_conformance.connection.discovery import DiscoveryError, ServerFacts, discover
from pytest_vllm_conformance.connection.secrets import Secret
from pytest_vllm_conformance.connection.settings import Settings


class BaselineUnusable(Exception):
    """A baseline was given but cannot be used; the run must not pass without it."""


@dataclass(frozen=True)
class LiveBaseline:
    client: BoundedClient
    facts: ServerFacts


def client_key(settings: Settings, role: str) -> Secret | None:
    """The API key for the ``target`` or the ``baseline`` (its own key when given, else the target's)."""
    return (settings.baseline_api_key or settings.api_key) if role == "baseline" else settings.api_key


def connect_baseline(settings: Settings, target_facts: ServerFacts) -> LiveBaseline:
    """The live baseline: its facts, and the model it serves (the target's id when it serves that too)."""
    assert settings.baseline_url is not None, "called with --vllm-baseline-url"
    client = client_for(settings, settings.baseline_url, api_key=client_key(settings, "baseline"))
    try:
        facts = discover(client, settings.baseline_model, preferred_model=target_facts.model)
    except DiscoveryError as exc:
        client.close()
        raise BaselineUnusable(f"--vllm-baseline-url: {exc}") from None
    return LiveBaseline(client, facts)
