"""The server's routes as the suites see them: the version's route table, guarded or not, and the route cases.

Discovery completes the table (served /openapi.json, else the contract
data probed); here it is read as cases: the scale-out routes a version
registers, every guarded route under three variants, every unguarded route.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from pytest_vllm_conformance.catalogue.cases import CaseContext, since
from pytest_vllm_conformance.catalogue.contracts import Catalogue
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.connection.client import BoundedClient, Response
from pytest_vllm_conformance.connection.discovery import KnownRoute, ServerFacts

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

    def send(self, client: BoundedClient, *, method: str | None = None, suffix: str = "", **kw: Any) -> Response:
        """The route's own method (or ``method``); bodies are ``{}``, which every handler refuses harmlessly."""
        method = method or self.method
        body: dict[str, Any] | None = {} if method in ("POST", "PUT", "PATCH") else None
        return client.request(method, self.concrete_path + suffix, json_body=body, **kw)

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
        if self.variant == "trailing slash":
            return self.route.send(client, suffix="/", **kw)
        if self.variant == "other method":
            return self.route.send(client, method=self.route.other_method(), **kw)
        return self.route.send(client, **kw)


def known_routes(catalogue: Catalogue, version: Version | None) -> list[KnownRoute]:
    """The routes vLLM ``version`` may register (fact ``route_table``), for discovery to probe."""
    return [
        KnownRoute(entry["method"], entry["path"], entry.get("openapi", True), entry["when"] == "always")
        for entry in catalogue.fact("route_table", version)
    ]


def served_routes(facts: ServerFacts) -> list[Route]:
    """The server's route table as discovery completed it (served, or probed from the contract data)."""
    routes = {Route(method, path) for path, methods in (facts.routes or {}).items() for method in methods}
    return sorted(routes, key=lambda r: (r.path, r.method))


def is_guarded(path: str, expect: Expectations) -> bool:
    return path.startswith(tuple(expect.fact("auth_guarded_prefixes")))


def is_public(path: str, public_routes: list[str]) -> bool:
    """Exact paths, or prefixes written as ``/prefix/*``."""
    return any(path == p or (p.endswith("/*") and path.startswith(p[:-1])) for p in public_routes)


def scale_out_routes(ctx: CaseContext) -> list[Route]:
    """The routes behind the version's scale-out gate (fact ``scale_out_routes``), whatever the table says."""
    version = ctx.server.parsed_version
    return [Route(r["method"], r["path"]) for r in ctx.expect.fact("scale_out_routes") if since(version, r["since"])]


def guarded_route_variants(ctx: CaseContext) -> list[RouteVariant]:
    """Every route under the key's guarded prefixes: exact, with a trailing slash, and under another method."""
    return [
        RouteVariant(route, variant)
        for route in served_routes(ctx.server)
        if route.method not in ("HEAD", "OPTIONS") and is_guarded(route.path, ctx.expect)
        for variant in ("exact", "trailing slash", "other method")
    ]


def unguarded_routes(ctx: CaseContext) -> list[Route]:
    """Every route outside the guarded prefixes: each must be declared public, or refuse callers without a key."""
    return [
        route
        for route in served_routes(ctx.server)
        if route.method not in ("HEAD", "OPTIONS") and not is_guarded(route.path, ctx.expect)
    ]
