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


# A guarded route sent at the server's bare path, outside the root path of the URL the run was given.
BARE = "without the root path"


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
        if self.variant == BARE:
            # The route's own path as the request-target, outside the root path the client's URL carries.
            return self.route.send(client, target=self.route.concrete_path, **kw)
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


# The route table's `when` of each task's routes (route_tables.yaml, route_conditions): a generation runner's routes
# are registered under "generate", a pooling runner's under "pooling" and "pooling_<task>", a speech-to-text one's
# under "transcription". Two of the pooling runner's are told apart: /v1/embeddings ("pooling_embed", an embedding
# model) and /score with /rerank ("pooling_score": an embedding model, or a classifier with one label), and
# /classify ("pooling_classify": a classifier, of any number of labels).
TASK_ROUTES = {
    "generation": ("generate",),
    "pooling": ("pooling",),
    "embeddings": ("pooling_embed",),
    "scoring": ("pooling_score",),
    "classification": ("pooling_classify",),
    "transcription": ("transcription",),
}


def served_tasks(catalogue: Catalogue, facts: ServerFacts | None) -> dict[str, bool]:
    """Whether the server serves generation, pooling, embeddings, scoring and classification (applicability.SERVES):
    its route table lists a route the release registers for the task.

    Told only by a table that shows some task's routes: without one (no facts, /openapi.json hidden and no contract
    data, or a gateway whose table shows no model route at all) both count as served, so nothing is turned off on
    a guess.
    """
    unknown = {"generation": True, "pooling": True, "embeddings": True, "scoring": True, "classification": True}
    if facts is None or facts.routes is None:
        return unknown
    table = catalogue.fact("route_table", facts.parsed_version)

    def serves(whens: tuple[str, ...]) -> bool:
        return any(
            facts.serves(entry["method"], entry["path"])
            for entry in table
            if entry["when"] in whens or entry["when"].startswith(tuple(f"{when}_" for when in whens))
        )

    served = {task: serves(whens) for task, whens in TASK_ROUTES.items()}
    if not any(served.values()):
        return unknown
    return {task: served[task] for task in unknown}


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


def bare_guarded_routes(ctx: CaseContext) -> list[RouteVariant]:
    """Every guarded route at the server's bare path: behind a root path in the URL, none answers without a key."""
    return [
        RouteVariant(route, BARE)
        for route in served_routes(ctx.server)
        if route.method not in ("HEAD", "OPTIONS") and is_guarded(route.path, ctx.expect)
    ]


@dataclass(frozen=True)
class PathVariant:
    """GET /v1/models spelled as a proxy or a key check may read otherwise than vLLM's router.

    ``target`` is sent as written, after the URL's own path; ``host_suffix`` is appended to the Host header
    (a Host holding ``/`` or ``?`` moved the path a key check read from the URL rebuilt from it: vLLM before
    0.22, CVE-2026-48746).
    """

    name: str
    target: str
    host_suffix: str = ""

    @property
    def id(self) -> str:
        return self.name

    def __str__(self) -> str:
        shown = f"GET {self.target}"
        return f"{shown} with Host: <host>{self.host_suffix}" if self.host_suffix else shown

    def send(self, client: BoundedClient, root_path: str, host: str, **kw: Any) -> Response:
        headers = {"Host": host + self.host_suffix} if self.host_suffix else None
        target = root_path + self.target
        return client.request("GET", target, target=target, headers=headers, **kw)


PATH_VARIANTS = (
    PathVariant("double slash", "//v1/models"),
    PathVariant("dot segment", "/v1/./models"),
    PathVariant("percent-encoded letter", "/v1/%6dodels"),
    PathVariant("trailing dot", "/v1/models."),
    PathVariant("upper case", "/V1/models"),
    PathVariant("Host with a path", "/v1/models", host_suffix="/health?"),
    PathVariant("Host with a query", "/v1/models", host_suffix="?"),
)


def path_variants(ctx: CaseContext) -> list[PathVariant]:
    """The spellings of GET /v1/models (always served) a guarded route must refuse without a key, or not serve."""
    return list(PATH_VARIANTS)
