"""What the server says about itself, read once per run.

Discovery observes and records; it decides nothing about conformance. The
one judgement it makes is whether there is a usable vLLM server at all,
because a run against nothing should end with one clear error, not with a
failure per test.

The route table comes from /openapi.json where the server serves it, and
from the contract data otherwise: every route the version is known to
register that /openapi.json does not list (all of them when it is hidden,
the hidden stubs and mounts when it is served) is probed with ``OPTIONS``,
which vLLM's key middleware lets through and its router answers with 405
(mounted under another method) or 404 (nothing there). So a hardened server
that hides /openapi.json is still checked route by route.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from packaging.version import InvalidVersion, Version

from pytest_vllm_conformance.connection.client import (
    BoundedClient,
    RequestTimeout,
    Response,
    TransportFailure,
    display_url,
)

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
MOUNTED = "mounted"
NOT_MOUNTED = "not mounted"
PATH_PARAMETER_VALUE = "conformance-probe"


# What a run behind a gateway needs, said where discovery meets a gateway instead of vLLM.
GATEWAY_KEY = "a gateway's own key goes in --vllm-ingress-api-key"
GATEWAY_TARGET = "a gateway in front of vLLM? give the vLLM server as --vllm-url and the gateway as --vllm-ingress-url"


class DiscoveryError(Exception):
    """There is no usable vLLM server at the target."""


@dataclass(frozen=True)
class ModelCard:
    id: str
    max_model_len: int | None
    root: str | None = None
    # The model a LoRA adapter's card names as its base (vLLM: the served base model's id); None on a base model.
    parent: str | None = None


@dataclass(frozen=True)
class RouteInventory:
    """Where the route table came from, and what probing the version's known routes found.

    ``probes`` maps ``"METHOD /path"`` to ``mounted``, ``not mounted`` (the
    router's 404), or ``unknown: <why>`` (something refused the probe before
    routing, e.g. a gateway's 401: the route is kept as a candidate).
    """

    source: str
    listed: int = 0
    probes: dict[str, str] = field(default_factory=dict)

    @property
    def not_mounted(self) -> list[str]:
        return sorted(route for route, state in self.probes.items() if state == NOT_MOUNTED)

    @property
    def kept(self) -> list[str]:
        return sorted(route for route, state in self.probes.items() if state != NOT_MOUNTED)

    def summary(self) -> str:
        found = len(self.kept)
        parts = [self.source]
        if self.probes:
            parts.append(
                f"{found} route(s) of the contract data found by probe, {len(self.not_mounted)} not mounted here"
            )
        unknown = sorted(route for route, state in self.probes.items() if state.startswith("unknown"))
        if unknown:
            parts.append(f"{len(unknown)} kept unprobed ({self.probes[unknown[0]]})")
        return "; ".join(parts)


@dataclass(frozen=True)
class FirstGeneration:
    """The one-token completion discovery asks for: a server that says it is healthy must be able to generate."""

    answer: str  # the exchange, described ("POST /v1/completions ... -> 200 in 40 ms")
    status: int | None = None  # None: no answer
    problem: str | None = None  # why the server cannot generate; None when it answered below 500


@dataclass(frozen=True)
class ServerFacts:
    url: str
    version: str | None
    models: tuple[ModelCard, ...]
    model: str
    # path -> methods: /openapi.json's table plus the contract data's routes found by probe.
    routes: dict[str, tuple[str, ...]] | None = field(default=None)
    inventory: RouteInventory | None = field(default=None)
    # The capture's fuller observation (capture.py), made only when a capture or a baseline is asked for.
    observed: dict[str, Any] | None = field(default=None, repr=False)
    first_generation: FirstGeneration | None = field(default=None)
    # What vllm:cache_config_info on /metrics says (--no-enable-prefix-caching: False); None: not read.
    prefix_caching: bool | None = field(default=None)
    # The tokens its KV cache holds, from the same labels (num_gpu_blocks less the null block, by block_size).
    kv_cache_tokens: int | None = field(default=None)

    @property
    def parsed_version(self) -> Version | None:
        return parse_version(self.version)

    @property
    def max_model_len(self) -> int | None:
        for card in self.models:
            if card.id == self.model:
                return card.max_model_len
        return None

    @property
    def lora_adapters(self) -> tuple[ModelCard, ...]:
        """The LoRA adapters /v1/models lists on the served model: the cards whose parent is its id."""
        return tuple(card for card in self.models if card.parent == self.model and card.id != self.model)

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
        inventory = data.get("inventory")
        first = data.get("first_generation")
        return cls(
            url=data["url"],
            version=data["version"],
            models=models,
            model=data["model"],
            routes=routes,
            inventory=RouteInventory(**inventory) if inventory else None,
            observed=data.get("observed"),
            first_generation=FirstGeneration(**first) if first else None,
            prefix_caching=data.get("prefix_caching"),
            kv_cache_tokens=data.get("kv_cache_tokens"),
        )


def parse_version(text: str | None) -> Version | None:
    """The base release the contracts are judged by: ``0.32.0+cpu`` -> 0.32.0, ``0.32.1.dev3+g1a2b`` -> 0.32.1.

    A pre-release or dev build is judged as the release it leads to: under
    PEP 440 ``0.28.0rc1`` falls outside ``>=0.28``, yet it serves 0.28's contracts.
    """
    if not text:
        return None
    try:
        version = Version(text)
    except InvalidVersion:
        return None
    return Version(version.base_version)


@dataclass(frozen=True)
class KnownRoute:
    """A route the contract data says a version may register."""

    method: str
    path: str
    # False for what vLLM registers outside its OpenAPI document (stubs, mounts, the docs themselves).
    in_openapi: bool = True
    # Registered on every server of that version (no flag, task or environment needed).
    always: bool = False


def model_cards(payload: Any) -> tuple[ModelCard, ...]:
    """The models a /v1/models answer lists (none when it is not a model list)."""
    cards = payload.get("data") if isinstance(payload, dict) else None
    return tuple(
        ModelCard(
            id=str(card.get("id")),
            max_model_len=_int_or_none(card.get("max_model_len")),
            root=_str_or_none(card.get("root")),
            parent=_str_or_none(card.get("parent")),
        )
        for card in (cards if isinstance(cards, list) else [])
        if isinstance(card, dict)
    )


KnownRoutes = Callable[[Version | None], Iterable[KnownRoute]]
# (prefix caching on, the KV cache's tokens) as the version's /metrics says them, each None where it does not.
PrefixCachingReader = Callable[[BoundedClient, Version | None], tuple[bool | None, int | None]]


def discover(
    client: BoundedClient,
    wanted_model: str | None = None,
    known_routes: KnownRoutes | None = None,
    *,
    preferred_model: str | None = None,
    read_prefix_caching: PrefixCachingReader | None = None,
) -> ServerFacts:
    """The server's facts, built once here.

    ``known_routes(version)``: what the contract data says that version may register. ``preferred_model``: the
    model to judge when the server serves it and none was asked for (a baseline judges the target's model).
    ``read_prefix_caching(client, version)``: what the server's /metrics says of prefix caching and of its KV
    cache's size (read by the protocol floor, which this one does not import).
    """
    where = display_url(client.base_url)

    def fetch(path: str):
        try:
            return client.get(path)
        except (TransportFailure, RequestTimeout) as exc:
            raise DiscoveryError(f"cannot reach vLLM at {where}: {exc}") from None

    health = fetch("/health")
    if 300 <= health.status < 400:
        raise DiscoveryError(
            f"cannot reach vLLM at {where}: GET /health was redirected ({health.status}) to "
            f"{_location(health)}: a login page or another host stands there; give the vLLM server's own URL"
        )
    if health.status != 200:
        prefix = urlsplit(client.base_url).path
        hint = (
            f" (is {prefix} the server's --root-path? else give its base URL)"
            if prefix and health.status == 404
            else ""
        )
        raise DiscoveryError(f"cannot reach vLLM at {where}: GET /health answered {health.status}, not 200{hint}")

    version_response = fetch("/version")
    version = None
    if version_response.status == 200:
        payload = version_response.json_or_none()
        # A /version that is not vLLM's {"version": ...} leaves the version unknown (discovery.version_parses fails).
        version = payload.get("version") if isinstance(payload, dict) else None
        version = version if isinstance(version, str) else None

    models_response = fetch("/v1/models")
    if models_response.status == 401:
        hint = (
            f"the API key was refused (--vllm-api-key is the server's own key; {GATEWAY_KEY})"
            if client.has_api_key
            else "give --vllm-api-key (or VLLM_API_KEY)"
        )
        raise DiscoveryError(f"vLLM at {where} requires an API key for /v1/models: {hint}")
    payload = models_response.json_or_none()
    if models_response.status != 200 or not isinstance(payload, dict):
        raise DiscoveryError(f"vLLM at {where}: GET /v1/models gave no model list: {models_response.describe()}")
    models = model_cards(payload)
    if not models:
        hint = f"; GET /version answered {version_response.status}: {GATEWAY_TARGET}" if version is None else ""
        raise DiscoveryError(f"vLLM at {where} serves no model (GET /v1/models listed none){hint}")
    ids = [card.id for card in models]
    if wanted_model is not None and wanted_model not in ids:
        raise DiscoveryError(f"vLLM at {where} does not serve model {wanted_model!r}; it serves {ids}")

    listed = _route_table(fetch("/openapi.json"))
    known = list(known_routes(parse_version(version))) if known_routes is not None else []
    routes, inventory = _inventory(client, listed, known, version)
    model = wanted_model or (preferred_model if preferred_model in ids else ids[0])
    cache = read_prefix_caching(client, parse_version(version)) if read_prefix_caching is not None else (None, None)
    return ServerFacts(
        url=where,
        version=version,
        models=models,
        model=model,
        routes=routes,
        inventory=inventory,
        first_generation=first_generation(client, model),
        prefix_caching=cache[0],
        kv_cache_tokens=cache[1],
    )


FIRST_GENERATION_PATH = "/v1/completions"


def first_generation(client: BoundedClient, model: str) -> FirstGeneration:
    """One token, asked before anything is judged: /health says the API server is up, not that the engine runs.

    A server error, a hung request or a dropped connection is a server that
    cannot generate. A refusal (4xx: a model that only embeds, a gateway
    that does not route completions) is no such proof either way, and says so.
    """
    body = {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    try:
        response = client.post(FIRST_GENERATION_PATH, body)
    except (TransportFailure, RequestTimeout) as exc:
        return FirstGeneration(f"POST {FIRST_GENERATION_PATH}: {exc}", None, f"no answer to one token: {exc}")
    answer = f"{response.describe()} {response.text[:300]!r}"
    if response.status >= 500:
        return FirstGeneration(answer, response.status, f"one token was answered with {response.status}: {answer}")
    return FirstGeneration(answer, response.status)


def _inventory(
    client: BoundedClient, listed: dict[str, tuple[str, ...]] | None, known: list[KnownRoute], version: str | None
) -> tuple[dict[str, tuple[str, ...]] | None, RouteInventory]:
    """The served table, completed by probing the known routes it does not list.

    A whole /openapi.json leaves out only what vLLM registers outside it; one
    that lacks a route the version always registers was trimmed (by a
    gateway, say), and then every known route it does not list is probed.
    """

    def lists(route: KnownRoute) -> bool:
        return route.method in (listed or {}).get(route.path, ())

    release = f"vLLM {version or '(unknown version)'}"
    if listed is None:
        if not known:
            return None, RouteInventory(
                "none: the server hides /openapi.json and the contract data has no routes for it"
            )
        source, to_probe = f"contract data for {release}: the server hides /openapi.json", known
    elif any(route.always and route.in_openapi and not lists(route) for route in known):
        source = (
            f"served /openapi.json, trimmed (it omits routes {release} always registers): "
            "the contract data's routes probed"
        )
        to_probe = [route for route in known if not lists(route)]
    else:
        source = "served /openapi.json"
        to_probe = [route for route in known if not route.in_openapi and not lists(route)]
    table = {path: set(methods) for path, methods in (listed or {}).items()}
    probes: dict[str, str] = {}
    answers: dict[str, Response | str] = {}  # one OPTIONS per path, whatever the methods asked about
    for route in to_probe:
        if route.path not in answers:
            answers[route.path] = options_probe(client, route.path)
        state = route_state(answers[route.path], route.method)
        probes[f"{route.method} {route.path}"] = state
        if state != NOT_MOUNTED:
            table.setdefault(route.path, set()).add(route.method)
    routes = {path: tuple(sorted(methods)) for path, methods in table.items()}
    return routes, RouteInventory(source, sum(len(m) for m in (listed or {}).values()), probes)


def options_probe(client: BoundedClient, path: str) -> Response | str:
    """``OPTIONS path`` (parameters filled in), or why it got no answer."""
    try:
        return client.request("OPTIONS", _concrete(path))
    except (TransportFailure, RequestTimeout) as exc:
        return f"unknown: {exc}"


def route_state(answer: Response | str, method: str) -> str:
    """What an OPTIONS probe says of ``method`` at its path.

    vLLM's key middleware lets OPTIONS through, and its router answers 404
    where nothing matches and 405 with ``Allow`` where a route matches the
    path under other methods; a mount (``/metrics``) answers the probe itself.
    Where ``Allow`` lacks the method the answer is undecided (Starlette names
    only the first matching route's methods), and the route is kept.
    """
    if isinstance(answer, str):
        return answer
    if answer.status == 404:
        return NOT_MOUNTED
    if answer.status in (401, 403, 407) or answer.status >= 500:
        return f"unknown: OPTIONS {answer.path} answered {answer.status}"
    allowed = answer.headers.get("allow")
    if answer.status == 405 and allowed and method.upper() not in {m.strip().upper() for m in allowed.split(",")}:
        # Starlette names the methods of the first route matching the path only: another may still serve ``method``.
        return f"unknown: OPTIONS {answer.path} answered 405 allowing {allowed}"
    return MOUNTED


def _concrete(path: str) -> str:
    parts = [PATH_PARAMETER_VALUE if part.startswith("{") and part.endswith("}") else part for part in path.split("/")]
    return "/".join(parts)


def _location(response: Response) -> str:
    location = response.headers.get("location") or "(no Location header)"
    return display_url(location.split("?", 1)[0])


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


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
