"""The auth suite's machinery: where its probes go, and what counts as a refusal there.

Through an ingress (--vllm-ingress-url) a gateway refuses with its own
status (401 or 403), and a route it serves nothing on (its own 404 or 405,
or a redirect to the route itself) lets no caller past a key either;
straight to the server, only vLLM's own refusal status counts.
suites/test_auth.py imports the fixtures.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

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


@pytest.fixture(scope="module")
def auth(vllm_expect):
    return vllm_expect.declared("endpoint", "auth")


@pytest.fixture(scope="module")
def through_ingress(vllm_ingress_exposure):
    return vllm_ingress_exposure.separate


@pytest.fixture(scope="module")
def entry(through_ingress):
    """Where the probes go, as failures name it."""
    return "the ingress" if through_ingress else "the server"


@pytest.fixture(scope="module")
def via(through_ingress):
    """Said after what a probe saw, so that an ingress's answer is never taken for vLLM's."""
    return " through the ingress" if through_ingress else ""


@pytest.fixture(scope="module")
def refusals(vllm_expect, through_ingress):
    return INGRESS_REFUSALS if through_ingress else (vllm_expect.fact("auth_failure_status"),)


@pytest.fixture(scope="module")
def entry_requires_key(vllm_ingress_client, entry):
    response = vllm_ingress_client.get("/v1/models", auth=False)
    if 200 <= response.status < 300:
        pytest.skip(f"{entry} answers /v1 without a key, so every route does (see auth.open_server_declared)")


@pytest.fixture
def hidden(vllm_not_exposed):
    """``hidden(route, report=False)``: the ingress does not expose ``route`` (asked its own request, with the key)."""

    def hidden(route, report=False):
        return vllm_not_exposed(str(route), lambda client: route.send(client), report=report)

    return hidden


@pytest.fixture
def refused(through_ingress, refusals, hidden):
    """``refused(variant, response)``: the probe got no answer from past a key check."""

    def refused(variant, response):
        if response.status in refusals:
            return True
        if not through_ingress:
            return False
        return hidden(variant.route) or response.status in NOT_EXPOSED or _redirects_to(response, variant.route)

    return refused


def _redirects_to(response: Response, route: Route) -> bool:
    """A gateway's redirect of ``/path/`` to ``/path``: the route itself, whose own probe is judged on its own."""
    location = urlsplit(response.headers.get("location") or "").path
    return response.status in REDIRECTS and location.endswith(route.concrete_path)


@pytest.fixture(scope="module")
def root_path(vllm_ingress_client):
    """The path of the URL the probes go to (the server's --root-path, or an ingress's mount point); "" for none."""
    return vllm_ingress_client.root_path


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
