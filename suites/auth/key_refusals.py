"""What counts as a refusal of a caller's key, where the auth probes go; and why a bare path answered.

Through an ingress (--vllm-ingress-url) a gateway refuses with its own
status (401 or 403), and a route it serves nothing on (its own 404 or 405,
or a redirect to the route itself) lets no caller past a key either;
straight to the server, only vLLM's own refusal status counts.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.catalogue.route_cases import Route
from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.connection.ingress import NOT_EXPOSED

WRONG_KEY = "Bearer conformance-wrong-key"
# Plugin policy: what a path variant may be answered besides a refusal: not served (404), a Host no entry routes
# (400, 421 Misdirected Request). Anything else came from past the key check.
NOT_ROUTED = (400, 404, 421)
# Plugin policy: a gateway's own refusal of a caller's key (Kong and LiteLLM say 401, Envoy's ext_authz 403).
INGRESS_REFUSALS = (401, 403)
REDIRECTS = (301, 302, 307, 308)


def refusal_statuses(expect: Expectations, through_ingress: bool) -> tuple[int, ...]:
    """The statuses that refuse a key where the probes go: a gateway's own, or the release's."""
    return INGRESS_REFUSALS if through_ingress else (expect.fact("auth_failure_status"),)


def refused_here(
    response: Response,
    route: Route,
    refusals: tuple[int, ...],
    through_ingress: bool,
    hidden: Callable[[Route], bool],
) -> bool:
    """The probe of ``route`` got no answer from past a key check: a refusal, or, through an ingress, a route it
    does not expose (``hidden``), serves nothing on, or redirects to the route itself."""
    if response.status in refusals:
        return True
    if not through_ingress:
        return False
    return hidden(route) or response.status in NOT_EXPOSED or _redirects_to(response, route)


def _redirects_to(response: Response, route: Route) -> bool:
    """A gateway's redirect of ``/path/`` to ``/path``: the route itself, whose own probe is judged on its own."""
    location = urlsplit(response.headers.get("location") or "").path
    return response.status in REDIRECTS and location.endswith(route.concrete_path)


def bare_path_cause(expect: Expectations, root_path: str, path: str) -> str:
    """Why ``path`` answered outside ``root_path``, as the release's key middleware reads it (fact
    ``auth_root_path_stripping``), and what the operator can do."""
    stripping = expect.fact("auth_root_path_stripping")
    guarded = tuple(expect.fact("auth_guarded_prefixes"))
    read_as = path.removeprefix(root_path)
    if not stripping["segment_aware"] and read_as != path and not read_as.startswith(guarded):
        return (
            f"vLLM {expect.version} removes the root path {root_path} as a string, not a path segment, so its key "
            f"check reads {path} as {read_as!r}, outside its guarded prefixes {list(guarded)}, while its router "
            f"still serves {path} ({stripping['issue']}). Start vLLM with a --root-path that none of those prefixes "
            f"begins with (/api, not /v or /v1), or let the ingress refuse paths outside {root_path}"
        )
    return f"the bare path is served past the key check; let the ingress refuse paths outside {root_path}"
