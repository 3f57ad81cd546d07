"""Cases a suite test runs over, derived from the server's facts and the expectations.

A suite says ``@each("route", "scale_out_routes")`` and the plugin
parametrizes the test with what the named source yields for this server:
the scale-out routes its version registers, every route of its table under
the guarded prefixes, the malformed requests its routes accept. Sources only
build requests; they never send one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from .client import BoundedClient, Response
from .discovery import ServerFacts
from .expectations import Expectations

PATH_PARAMETER = re.compile(r"\{[^}]+\}")
PROBE_ID = "conformance-probe"


@dataclass(frozen=True)
class Route:
    method: str
    path: str

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}"

    def __str__(self) -> str:
        return self.id

    @property
    def concrete_path(self) -> str:
        """The path with every ``{parameter}`` filled by a harmless value."""
        return PATH_PARAMETER.sub(PROBE_ID, self.path)

    def send(self, client: BoundedClient, **kw: Any) -> Response:
        """The route's own method; POST bodies are ``{}``, which every handler refuses harmlessly."""
        body = {} if self.method in ("POST", "PUT", "PATCH") else None
        return client.request(self.method, self.concrete_path, json_body=body, **kw)

    def other_method(self) -> str:
        return "POST" if self.method == "GET" else "GET"


@dataclass(frozen=True)
class RouteVariant:
    """A guarded route as sent: exact, with a trailing slash, or under another method."""

    route: Route
    variant: str

    @property
    def id(self) -> str:
        return f"{self.route.id} ({self.variant})"

    def __str__(self) -> str:
        return self.id

    def send(self, client: BoundedClient, **kw: Any) -> Response:
        path = self.route.concrete_path
        if self.variant == "trailing slash":
            return client.request(self.route.method, path + "/", json_body={} if self.route.method == "POST" else None, **kw)
        if self.variant == "other method":
            method = self.route.other_method()
            return client.request(method, path, json_body={} if method == "POST" else None, **kw)
        return self.route.send(client, **kw)


@dataclass(frozen=True)
class MalformedRequest:
    """A request whose list field holds ``size`` items of the wrong type."""

    path: str
    field: str
    item: Any
    size: int
    base: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.path} {self.field}x{self.size}"

    def __str__(self) -> str:
        return self.id

    def body(self, model: str) -> dict[str, Any]:
        return {"model": model, **self.base, self.field: [self.item] * self.size}


Source = Callable[[ServerFacts, Expectations], list[Any]]
SOURCES: dict[str, Source] = {}


def source(function: Source) -> Source:
    SOURCES[function.__name__] = function
    return function


def build(name: str, facts: ServerFacts | None, expect: Expectations) -> list[Any]:
    if name not in SOURCES:
        raise KeyError(f"no case source {name!r}; known: {sorted(SOURCES)}")
    if facts is None:
        return []
    return SOURCES[name](facts, expect)


def _since(version: Version | None, since: str) -> bool:
    return version is None or version >= Version(since)


@source
def scale_out_routes(facts: ServerFacts, expect: Expectations) -> list[Route]:
    version = facts.parsed_version
    return [Route(r["method"], r["path"]) for r in expect.fact("scale_out_routes") if _since(version, r["since"])]


def _all_routes(facts: ServerFacts, expect: Expectations) -> list[Route]:
    routes = {Route(method, path) for path, methods in (facts.routes or {}).items() for method in methods}
    routes.update(Route(r["method"], r["path"]) for r in expect.fact("routes_outside_openapi"))
    if expect.declared("endpoint", "scale_out", default_fact="scale_out_default").value == "enabled":
        # 0.32+ leaves the scale-out routes out of /openapi.json even when they are served.
        routes.update(scale_out_routes(facts, expect))
    return sorted(routes, key=lambda r: (r.path, r.method))


def is_guarded(path: str, expect: Expectations) -> bool:
    return path.startswith(tuple(expect.fact("auth_guarded_prefixes")))


@source
def guarded_route_variants(facts: ServerFacts, expect: Expectations) -> list[RouteVariant]:
    variants = []
    for route in _all_routes(facts, expect):
        if route.method in ("HEAD", "OPTIONS") or not is_guarded(route.path, expect):
            continue
        for variant in ("exact", "trailing slash", "other method"):
            variants.append(RouteVariant(route, variant))
    return variants


def is_public(path: str, public_routes: list[str]) -> bool:
    """Exact paths, or prefixes written as ``/prefix/*``."""
    return any(path == p or (p.endswith("/*") and path.startswith(p[:-1])) for p in public_routes)


@source
def unguarded_routes(facts: ServerFacts, expect: Expectations) -> list[Route]:
    """Routes outside the guarded prefixes that the profile does not declare public."""
    public = expect.declared("endpoint", "public_routes", default_fact="default_public_routes").value
    return [
        route
        for route in _all_routes(facts, expect)
        if route.method not in ("HEAD", "OPTIONS")
        and not is_guarded(route.path, expect)
        and not is_public(route.path, public)
    ]


@source
def malformed_list_requests(facts: ServerFacts, expect: Expectations) -> list[MalformedRequest]:
    sizes = expect.fact("malformed_list_sizes")
    return [
        MalformedRequest(entry["path"], entry["field"], entry["item"], size, entry.get("base", {}))
        for entry in expect.fact("malformed_list_requests")
        if facts.serves("POST", entry["path"])
        for size in sizes
    ]


@dataclass(frozen=True)
class OversizedDeclaration:
    """A sparse prompt_embeds payload of a few KB that declares a huge dense tensor."""

    name: str
    shape: tuple[int, int]

    @property
    def id(self) -> str:
        return f"declares {self.name} {self.shape[0]}x{self.shape[1]}"

    def __str__(self) -> str:
        return self.id


@source
def oversized_prompt_embeds(facts: ServerFacts, expect: Expectations) -> list[OversizedDeclaration]:
    return [
        OversizedDeclaration(entry["name"], tuple(entry["shape"]))
        for entry in expect.fact("prompt_embeds_oversized_declarations")
    ]
