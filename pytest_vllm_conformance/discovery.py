"""What the server says about itself, read once per run.

Discovery observes and records; it decides nothing about conformance. The
one judgement it makes is whether there is a usable vLLM server at all,
because a run against nothing should end with one clear error, not with a
failure per test.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from .client import BoundedClient, RequestTimeout, TransportFailure, display_url

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


class DiscoveryError(Exception):
    """There is no usable vLLM server at the target."""


@dataclass(frozen=True)
class ModelCard:
    id: str
    max_model_len: int | None
    root: str | None = None


@dataclass(frozen=True)
class ServerFacts:
    url: str
    version: str | None
    models: tuple[ModelCard, ...]
    model: str
    routes: dict[str, tuple[str, ...]] | None = field(default=None)
    # The capture's fuller observation (capture.py), made only when a capture or a baseline is asked for.
    observed: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def parsed_version(self) -> Version | None:
        return parse_version(self.version)

    @property
    def max_model_len(self) -> int | None:
        for card in self.models:
            if card.id == self.model:
                return card.max_model_len
        return None

    def serves(self, method: str, path: str) -> bool:
        """True when the route table lists ``method path`` (unknown table: False)."""
        return method.upper() in (self.routes or {}).get(path, ())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerFacts:
        models = tuple(ModelCard(**card) for card in data["models"])
        routes = data.get("routes")
        if routes is not None:
            routes = {path: tuple(methods) for path, methods in routes.items()}
        return cls(
            url=data["url"],
            version=data["version"],
            models=models,
            model=data["model"],
            routes=routes,
            observed=data.get("observed"),
        )


def parse_version(text: str | None) -> Version | None:
    """``0.32.0+cpu`` -> 0.32.0; the local part (+cpu) does not change the contract."""
    if not text:
        return None
    try:
        version = Version(text)
    except InvalidVersion:
        return None
    return Version(version.public)


def discover(client: BoundedClient, wanted_model: str | None = None) -> ServerFacts:
    where = display_url(client.base_url)

    def fetch(path: str):
        try:
            return client.get(path)
        except (TransportFailure, RequestTimeout) as exc:
            raise DiscoveryError(f"cannot reach vLLM at {where}: {exc}") from None

    health = fetch("/health")
    if health.status != 200:
        raise DiscoveryError(f"cannot reach vLLM at {where}: GET /health answered {health.status}, not 200")

    version_response = fetch("/version")
    version = None
    if version_response.status == 200:
        version = (version_response.json_or_none() or {}).get("version")

    models_response = fetch("/v1/models")
    if models_response.status == 401:
        hint = "the API key was refused" if client.has_api_key else "give --vllm-api-key (or VLLM_API_KEY)"
        raise DiscoveryError(f"vLLM at {where} requires an API key for /v1/models: {hint}")
    payload = models_response.json_or_none()
    if models_response.status != 200 or not isinstance(payload, dict):
        raise DiscoveryError(f"vLLM at {where}: GET /v1/models gave no model list: {models_response.describe()}")
    models = tuple(
        ModelCard(id=str(card.get("id")), max_model_len=card.get("max_model_len"), root=card.get("root"))
        for card in payload.get("data", [])
        if isinstance(card, dict)
    )
    if not models:
        raise DiscoveryError(f"vLLM at {where} serves no model (GET /v1/models listed none)")
    ids = [card.id for card in models]
    if wanted_model is not None and wanted_model not in ids:
        raise DiscoveryError(f"vLLM at {where} does not serve model {wanted_model!r}; it serves {ids}")

    return ServerFacts(
        url=where,
        version=version,
        models=models,
        model=wanted_model or ids[0],
        routes=_route_table(fetch("/openapi.json")),
    )


def _route_table(response) -> dict[str, tuple[str, ...]] | None:
    """Path -> methods from the OpenAPI document; None when the server hides it."""
    document = response.json_or_none() if response.status == 200 else None
    if not isinstance(document, dict) or not isinstance(document.get("paths"), dict):
        return None
    table = {}
    for path, operations in document["paths"].items():
        if isinstance(operations, dict):
            methods = tuple(sorted(m.upper() for m in operations if m.upper() in HTTP_METHODS))
            if methods:
                table[path] = methods
    return table
