"""The API key guards every route it should; only declared-public routes answer without it.

vLLM's key middleware guards path prefixes (fact ``auth_guarded_prefixes``),
so routes outside them answer anyone: /invocations runs inference, /tokenize
leaks the tokenizer. Probes never trigger side effects: guarded routes get
``{}`` bodies, and unguarded routes are probed with a method they do not
serve, which an auth layer refuses before routing and a router refuses with
405 (a 404 means nothing is served there).

The probes go where callers go: through the ingress when --vllm-ingress-url
is given, with the key callers send there. The routes are still vLLM's
(discovered on --vllm-url), so a gateway's own routes (LiteLLM's
/health/liveliness) are never judged as vLLM's. A gateway refuses with its own
status (401 or 403), and where it serves nothing (its 404 or 405, or a
redirect to the route itself) no caller gets past a key. A route the ingress
does not expose at all (its own 404/405 to the route's own request while the
server answers it) is reported "not exposed by the ingress", not failed, when
the profile declares it hidden (ingress.hidden_routes); else it fails, named.

A URL with a path (the server's --root-path, or the mount point of an
ingress) is where callers go, and the server's bare paths must not answer
them past the key either: vLLM strips its root path as a string (fact
auth_root_path_stripping), so `--root-path /v` opens every /v1 route at the
bare path. GET /v1/models spelled as a proxy may read it otherwise (a doubled
slash, a dot segment, an escaped letter, a trailing dot, another case, a Host
header holding / or ?) is refused without a key, or not served.
"""

import pytest

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.catalogue.route_cases import (
    bare_guarded_routes,
    guarded_route_variants,
    is_public,
    path_variants,
    unguarded_routes,
)

from .key_refusals import NOT_ROUTED, WRONG_KEY, bare_path_cause, refusal_statuses, refused_here


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
    return refusal_statuses(vllm_expect, through_ingress)


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
    return lambda variant, response: refused_here(response, variant.route, refusals, through_ingress, hidden)


@pytest.fixture(scope="module")
def root_path(vllm_ingress_client):
    """The path of the URL the probes go to (the server's --root-path, or an ingress's mount point); "" for none."""
    return vllm_ingress_client.root_path


@contract("auth.open_server_declared")
def test_open_server_declared(auth, vllm_ingress_client, refusals, entry):
    response = vllm_ingress_client.get("/v1/models", auth=False)
    if auth.value == "required":
        state = "is open" if response.status < 400 else "does not refuse a caller without a key"
        assert response.status in refusals, (
            f"auth is {auth}, but {entry} {state}: {response.describe()} without a key. "
            "Start vLLM with --api-key (or refuse keyless callers at the ingress), "
            "or declare `endpoint.auth: none` in the profile."
        )
    else:
        assert response.status not in refusals, f"auth is {auth}, but {entry} requires a key: {response.describe()}"


@contract("auth.guarded_route_refuses_missing_key")
@each("route", guarded_route_variants)
def test_guarded_route_refuses_missing_key(route, vllm_ingress_client, refused, via):
    response = route.send(vllm_ingress_client, auth=False)
    assert refused(route, response), f"{route} answered without a key{via}: {response.describe()}"


@contract("auth.guarded_route_refuses_wrong_key")
@each("route", guarded_route_variants)
def test_guarded_route_refuses_wrong_key(route, vllm_ingress_client, refused, via):
    response = route.send(vllm_ingress_client, auth=False, headers={"Authorization": WRONG_KEY})
    assert refused(route, response), f"{route} answered a wrong key{via}: {response.describe()}"


@contract("auth.guarded_route_refuses_other_scheme")
@each("route", guarded_route_variants)
def test_guarded_route_refuses_other_scheme(route, vllm_ingress_client, refused, via):
    other_scheme = vllm_ingress_client.key_under_scheme("Basic")
    response = route.send(vllm_ingress_client, auth=False, headers=other_scheme)
    assert refused(route, response), f"{route} accepted the key under the Basic scheme{via}: {response.describe()}"


@contract("auth.guarded_route_accepts_key")
@each("route", guarded_route_variants)
def test_guarded_route_accepts_key(route, vllm_ingress_client, refusals, hidden, via):
    # Reported once per route, here, where the route's own request with the key is what is sent.
    if hidden(route.route, report=route.variant == "exact"):
        return
    response = route.send(vllm_ingress_client)
    assert response.status not in refusals, f"{route} refused the right key{via}: {response.describe()}"


@contract("auth.unguarded_route_is_public")
@each("route", unguarded_routes)
def test_unguarded_route_is_public(
    route,
    entry_requires_key,
    vllm_ingress_client,
    vllm_expect,
    refusals,
    vllm_record,
    vllm_not_exposed,
    via,
    vllm_evidence,
):
    public = vllm_expect.declared("endpoint", "public_routes")

    # Probed under the other method, so that nothing runs: any answer but a refusal came from past the key check.
    def probe(client):
        return route.send(client, method=route.other_method(), auth=False)

    if is_public(route.path, public.value):
        vllm_record("declared_public", f"{route.path} ({public.basis})")
        vllm_evidence.judged(1, "declared public routes")
        vllm_not_exposed(str(route), probe)  # public or not, whether callers reach it through the ingress is reported
        return
    response = probe(vllm_ingress_client)
    if vllm_not_exposed(str(route), probe, response):
        return
    risk = vllm_expect.release.unguarded_route_risks.get(route.path, "not declared public")
    assert response.status in (*refusals, 403, 404), (
        f"{route} answers without a key{via} ({risk}): probed without a key under another method so that "
        f"nothing runs, {response.describe()} came from past the key check; public_routes are {public}"
    )


@contract("auth.root_path_prefix_required")
@each("route", bare_guarded_routes)
def test_root_path_prefix_required(route, vllm_ingress_client, root_path, refused, vllm_expect, via):
    response = route.send(vllm_ingress_client, auth=False)
    assert refused(route, response), (
        f"{route.route} answered without a key at the bare path{via}, outside the root path {root_path} of the "
        f"URL: {response.describe()}; {bare_path_cause(vllm_expect, root_path, route.route.concrete_path)}"
    )


@contract("auth.path_variants_refused")
@each("variant", path_variants)
def test_path_variants_refused(variant, vllm_ingress_client, root_path, refusals, via):
    response = variant.send(vllm_ingress_client, root_path, vllm_ingress_client.host, auth=False)
    assert response.status in (*refusals, *NOT_ROUTED), (
        f"{variant} ({variant.name}) answered without a key{via}: {response.describe()}; a path a proxy or key "
        f"check reads otherwise than the router reached a guarded route (expected {list(refusals)}, or "
        f"{list(NOT_ROUTED)}: not served)"
    )
