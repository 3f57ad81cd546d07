"""The API key guards every route it should; only declared-public routes answer without it.

vLLM's key middleware guards path prefixes (fact ``auth_guarded_prefixes``),
so routes outside them answer anyone: /invocations runs inference, /tokenize
leaks the tokenizer. Probes never trigger side effects: guarded routes get
``{}`` bodies, and unguarded routes are probed with a method they do not
serve, which an auth layer refuses before routing and a router refuses with
405 (a 404 means nothing is served there).
"""

import pytest

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.catalogue.routes import guarded_route_variants, is_public, unguarded_routes

WRONG_KEY = "Bearer conformance-wrong-key"


@pytest.fixture(scope="module")
def auth(vllm_expect):
    return vllm_expect.declared("endpoint", "auth")


@pytest.fixture(scope="module")
def refusal(vllm_expect):
    return vllm_expect.fact("auth_failure_status")


@pytest.fixture(scope="module")
def key_required(vllm_client):
    if not vllm_client.has_api_key:
        pytest.skip("no API key given (--vllm-api-key or VLLM_API_KEY): guarded routes cannot be checked")


@pytest.fixture(scope="module")
def server_requires_key(vllm_client, refusal):
    response = vllm_client.get("/v1/models", auth=False)
    if response.status != refusal:
        pytest.skip("the server answers /v1 without a key, so every route does (see auth.open_server_declared)")


@contract("auth.open_server_declared")
def test_open_server_declared(auth, vllm_client, refusal):
    response = vllm_client.get("/v1/models", auth=False)
    if auth.value == "required":
        assert response.status == refusal, (
            f"auth is {auth}, but the server is open: {response.describe()} without a key. "
            "Start vLLM with --api-key, or declare `endpoint.auth: none` in the profile."
        )
    else:
        assert response.status != refusal, f"auth is {auth}, but the server requires a key: {response.describe()}"


@contract("auth.guarded_route_refuses_missing_key")
@each("route", guarded_route_variants)
def test_guarded_route_refuses_missing_key(route, key_required, vllm_client, refusal):
    response = route.send(vllm_client, auth=False)
    assert response.status == refusal, f"{route} answered without a key: {response.describe()}"


@contract("auth.guarded_route_refuses_wrong_key")
@each("route", guarded_route_variants)
def test_guarded_route_refuses_wrong_key(route, key_required, vllm_client, refusal):
    response = route.send(vllm_client, auth=False, headers={"Authorization": WRONG_KEY})
    assert response.status == refusal, f"{route} answered a wrong key: {response.describe()}"


@contract("auth.guarded_route_refuses_other_scheme")
@each("route", guarded_route_variants)
def test_guarded_route_refuses_other_scheme(route, key_required, vllm_client, vllm_settings, refusal):
    other_scheme = {"Authorization": f"Basic {vllm_settings.api_key.reveal()}"}
    response = route.send(vllm_client, auth=False, headers=other_scheme)
    assert response.status == refusal, f"{route} accepted the key under the Basic scheme: {response.describe()}"


@contract("auth.guarded_route_accepts_key")
@each("route", guarded_route_variants)
def test_guarded_route_accepts_key(route, key_required, vllm_client, refusal):
    response = route.send(vllm_client)
    assert response.status != refusal, f"{route} refused the right key: {response.describe()}"


@contract("auth.unguarded_route_is_public")
@each("route", unguarded_routes)
def test_unguarded_route_is_public(route, server_requires_key, vllm_client, vllm_expect, refusal, vllm_record):
    public = vllm_expect.declared("endpoint", "public_routes")
    if is_public(route.path, public.value):
        vllm_record("declared_public", f"{route.path} ({public.basis})")
        return
    # Probed under the other method, so that nothing runs: any answer but a refusal came from past the key check.
    response = route.send(vllm_client, method=route.other_method(), auth=False)
    risk = vllm_expect.fact("unguarded_route_risks").get(route.path, "not declared public")
    assert response.status in (refusal, 403, 404), (
        f"{route} answers without a key ({risk}): probed without a key under another method so that nothing "
        f"runs, {response.describe()} came from past the key check; public_routes are {public}"
    )
