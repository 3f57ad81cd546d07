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

from pytest_vllm_conformance.features.profile import diff as profile_diff
from pytest_vllm_conformance.target.client import BoundedClient, Response
from pytest_vllm_conformance.features.context import CONTEXT_ENDPOINTS, ContextEndpoint
from pytest_vllm_conformance.catalogue.contracts import Catalogue
from pytest_vllm_conformance.target.discovery import KnownRoute, ServerFacts
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.features.metrics import ExpectedFamily
from pytest_vllm_conformance.target.settings import Settings
from pytest_vllm_conformance.features.preflight.lint import DeploymentFile
from pytest_vllm_conformance.features.preflight.lint import deployment_files as find_deployment_files
from pytest_vllm_conformance.features.startup_log import FindingKind, finding_kinds

PATH_PARAMETER = re.compile(r"\{[^}]+\}")
PROBE_ID = "conformance-probe"


@dataclass(frozen=True)
class Named:
    """A case that is just a name: a dashboard series, a user's lm-eval task."""

    name: str

    @property
    def id(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


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
        body = {} if method in ("POST", "PUT", "PATCH") else None
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


class NoCases(Exception):
    """A source has nothing to run over for a reason of its own; the message is the skip reason."""


# Sources that need no server (preflight's deployment files, the kinds of
# start-up log finding): they read the run's settings and the catalogue, so
# their suites run without --vllm-url.
OfflineSource = Callable[[Settings | None, Expectations], list[Any]]
OFFLINE_SOURCES: dict[str, OfflineSource] = {}


def offline_source(function: OfflineSource) -> OfflineSource:
    OFFLINE_SOURCES[function.__name__] = function
    return function


def build(name: str, facts: ServerFacts | None, expect: Expectations, settings: Settings | None = None) -> list[Any]:
    if name in OFFLINE_SOURCES:
        return OFFLINE_SOURCES[name](settings, expect)
    if name not in SOURCES:
        raise KeyError(f"no case source {name!r}; known: {sorted(SOURCES) + sorted(OFFLINE_SOURCES)}")
    if facts is None:
        return []
    return SOURCES[name](facts, expect)


def _since(version: Version | None, since: str) -> bool:
    return version is None or version >= Version(since)


@source
def scale_out_routes(facts: ServerFacts, expect: Expectations) -> list[Route]:
    version = facts.parsed_version
    return [Route(r["method"], r["path"]) for r in expect.fact("scale_out_routes") if _since(version, r["since"])]


def known_routes(catalogue: Catalogue, version: Version | None) -> list[KnownRoute]:
    """The routes vLLM ``version`` may register (fact ``route_table``), for discovery to probe."""
    return [
        KnownRoute(entry["method"], entry["path"], entry.get("openapi", True), entry["when"] == "always")
        for entry in catalogue.fact("route_table", version)
    ]


def _all_routes(facts: ServerFacts, expect: Expectations) -> list[Route]:
    """The server's route table as discovery completed it (served, or probed from the contract data)."""
    routes = {Route(method, path) for path, methods in (facts.routes or {}).items() for method in methods}
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
    """Every route outside the guarded prefixes: each must be declared public, or refuse callers without a key."""
    return [
        route
        for route in _all_routes(facts, expect)
        if route.method not in ("HEAD", "OPTIONS") and not is_guarded(route.path, expect)
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


@source
def context_endpoints(facts: ServerFacts, expect: Expectations) -> list[ContextEndpoint]:
    """Generation routes whose prompt counts against max_model_len."""
    return [e for e in CONTEXT_ENDPOINTS if facts.serves("POST", e.path)]


@source
def profile_differences(facts: ServerFacts, expect: Expectations) -> list[profile_diff.Difference]:
    """Each difference from the baseline, or the one finding that there is none."""
    if expect.baseline is None:
        raise NoCases("no baseline to compare with")
    if facts.observed is None:
        raise NoCases("the target was not observed (the run's controlling process makes the observation)")
    ignore = expect.declared("profile_diff", "ignore").value
    return profile_diff.differences(expect.baseline.data["observed"], facts.observed, ignore) or [profile_diff.NO_DIFFERENCE]


@dataclass(frozen=True)
class GenerationApi:
    """An API whose body accepts the per-request watermark opt-out, and how to sample from it.

    ``field`` is where the opt-out sits in the body; the generated token ids
    come back in the answer when ``returns_token_ids``, else only as text.
    """

    name: str
    path: str
    shape: str
    field: tuple[str, ...]
    returns_token_ids: bool
    form: bool = False

    @property
    def id(self) -> str:
        return f"{self.name} (POST {self.path})"

    def __str__(self) -> str:
        return self.id

    def body(
        self,
        model: str,
        prompt: str,
        max_tokens: int,
        *,
        temperature: float = 1.0,
        watermarking: bool | None = None,
        prompt_token_ids: list[int] | None = None,
    ) -> dict[str, Any]:
        """A sampled request of ``max_tokens`` tokens; ``watermarking`` set only when given."""
        messages = [{"role": "user", "content": prompt}]
        want_ids = {"return_token_ids": True} if self.returns_token_ids else {}
        # ignore_eos where the API has it: a short answer cannot reach the planned p-value.
        bodies = {
            "completion": {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, **want_ids},
            "chat": {"messages": messages, "max_tokens": max_tokens, "ignore_eos": True, **want_ids},
            "chat_batch": {"messages": [messages], "max_tokens": max_tokens, **want_ids},
            "responses": {"input": prompt, "max_output_tokens": max_tokens, "ignore_eos": True}
            | ({"enable_response_messages": True} if self.returns_token_ids else {}),
            "messages": {"messages": messages, "max_tokens": max_tokens},
            "cohere_chat": {"messages": messages, "max_tokens": max_tokens},
            "generate": {
                "token_ids": prompt_token_ids,
                "sampling_params": {"max_tokens": max_tokens, "temperature": temperature, "ignore_eos": True},
            },
        }
        if self.shape not in bodies:
            raise ValueError(f"{self}: the suite cannot build a {self.shape} request")
        body: dict[str, Any] = {"model": model, "temperature": temperature, **bodies[self.shape]}
        if self.shape == "generate":
            del body["temperature"]
        if watermarking is not None:
            holder = body
            for key in self.field[:-1]:
                holder = holder.setdefault(key, {})
            holder[self.field[-1]] = watermarking
        return body

    def generated_token_ids(self, payload: Any) -> list[int] | None:
        """The generated token ids in an answer, when the API returned them."""
        try:
            if self.shape == "responses":
                ids = [token for message in payload["output_messages"] for token in message["tokens"]]
            else:
                ids = payload["choices"][0]["token_ids"]
        except (KeyError, IndexError, TypeError):
            return None
        return ids if isinstance(ids, list) and all(type(token) is int for token in ids) else None

    def generated_text(self, payload: Any) -> str | None:
        """The generated text in an answer (to be re-tokenized when no ids came back)."""
        try:
            if self.shape == "completion":
                return payload["choices"][0]["text"]
            if self.shape in ("chat", "chat_batch"):
                return payload["choices"][0]["message"]["content"]
            if self.shape == "responses":
                parts = [part for item in payload["output"] for part in item.get("content") or []]
                return "".join(part["text"] for part in parts if part.get("type") == "output_text")
            if self.shape == "messages":
                return "".join(block["text"] for block in payload["content"] if block.get("type") == "text")
            if self.shape == "cohere_chat":
                return "".join(part["text"] for part in payload["message"]["content"] if part.get("type") == "text")
        except (KeyError, IndexError, TypeError):
            return None
        return None


@source
def watermark_opt_out_apis(facts: ServerFacts, expect: Expectations) -> list[GenerationApi]:
    """The APIs of this server's version that accept the opt-out and that this server serves."""
    version = facts.parsed_version
    scale_out = expect.declared("endpoint", "scale_out").value
    apis = []
    for entry in expect.fact("watermark_opt_out_apis"):
        if not _since(version, entry["since"]) or not facts.serves("POST", entry["path"]):
            continue
        if entry.get("needs") == "scale_out" and scale_out != "enabled":
            continue  # 0.32+ mount a 403 stub there while scale-out is off: nothing to sample
        returns_ids = "token_ids_since" in entry and _since(version, entry["token_ids_since"])
        apis.append(
            GenerationApi(entry["api"], entry["path"], entry["shape"], tuple(entry["field"]), returns_ids, entry.get("form", False))
        )
    return apis


# ---- operational suites: metrics, preflight, startup_log ----------------------------


@source
def expected_metric_families(facts: ServerFacts, expect: Expectations) -> list[ExpectedFamily]:
    """The families the server's version registers, those of an undeclared feature left out."""
    declared = set(expect.profile.data) if expect.profile is not None else set()
    return [
        ExpectedFamily(entry["name"], entry["type"], entry["since"], entry.get("when"))
        for entry in expect.fact("metric_families")
        if _since(facts.parsed_version, entry["since"]) and entry.get("when", None) in (None, *declared)
    ]


@source
def dashboard_series(facts: ServerFacts, expect: Expectations) -> list[Named]:
    return [Named(name) for name in expect.declared("metrics", "dashboard_names").value or ()]


@offline_source
def deployment_files(settings: Settings | None, expect: Expectations) -> list[DeploymentFile]:
    if settings is None or not settings.manifests:
        raise NoCases("no deployment files given (--vllm-manifests=DIR)")
    files = find_deployment_files(settings.manifests)
    if not files:
        raise NoCases(f"no deployment files (YAML, JSON, .env, Dockerfile, shell) under {settings.manifests}")
    return files


@offline_source
def startup_log_findings(settings: Settings | None, expect: Expectations) -> list[FindingKind]:
    return finding_kinds(expect.fact("startup_log_findings"))


@offline_source
def user_eval_tasks(settings: Settings | None, expect: Expectations) -> list[Named]:
    return [Named(name) for name in (settings.eval_task if settings is not None else ())]
