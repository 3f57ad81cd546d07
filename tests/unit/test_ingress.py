"""Whether an ingress exposes a route, judged from its answer and the server's to the same request; keys per entry."""

from __future__ import annotations

import httpx

from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.connection.connect import ingress_key, target_key
from pytest_vllm_conformance.connection.ingress import (
    IngressExposure,
    declared_hidden,
    hidden_by_ingress,
    route_named,
    undeclared_hidden_line,
    unreached_model,
)
from pytest_vllm_conformance.connection.secrets import Secret
from pytest_vllm_conformance.connection.settings import Settings


def answer(status: int) -> Response:
    return Response("POST", "/invocations", status, httpx.Headers(), b"", 0, False, 0.0)


def test_only_the_ingress_own_404_or_405_hides_a_route():
    assert hidden_by_ingress(answer(404), answer(400))  # the server's handler refused the body: it serves the route
    assert hidden_by_ingress(answer(404), answer(405))  # the server's router knows the path under another method
    assert hidden_by_ingress(answer(405), answer(200))
    assert not hidden_by_ingress(answer(404), answer(404))  # the server's own 404, passed on: forwarded
    assert not hidden_by_ingress(answer(401), answer(200))  # a refusal is the auth suite's business, not exposure
    assert not hidden_by_ingress(answer(200), answer(200))


class Client:
    """Answers every request with one status, and counts them."""

    def __init__(self, status: int) -> None:
        self.status, self.asked = status, 0


def ask(client: Client) -> Response:
    client.asked += 1
    return answer(client.status)


def test_the_server_is_asked_only_when_the_ingress_answered_404_and_once_per_request():
    ingress, server = Client(404), Client(400)
    exposure = IngressExposure(ingress, server)  # type: ignore[arg-type]
    assert exposure.hiding_status("POST /invocations", ask) == 404
    assert exposure.hiding_status("POST /invocations", ask) == 404
    assert (ingress.asked, server.asked) == (1, 1)
    exposed = IngressExposure(Client(200), server)  # type: ignore[arg-type]
    assert exposed.hiding_status("POST /invocations", ask) is None
    assert server.asked == 1


def test_without_a_separate_server_nothing_is_hidden_or_asked():
    ingress = Client(404)
    assert IngressExposure(ingress, None).hiding_status("POST /x", ask) is None  # type: ignore[arg-type]
    assert IngressExposure(ingress, ingress).hiding_status("POST /x", ask) is None  # type: ignore[arg-type]
    assert ingress.asked == 0


def test_a_hidden_request_is_named_by_its_route_whatever_the_check_calls_it():
    assert route_named("SageMaker invocations (POST /invocations)") == "POST /invocations"
    assert route_named("POST /v1/chat/completions plain") == "POST /v1/chat/completions"
    assert route_named("GET /v1/models") == "GET /v1/models"
    # The route's own name wins over the request sent (auth probes a route under its other method).
    assert route_named("POST /invocations", answer(404)) == "POST /invocations"
    assert route_named("the batch route", answer(404)) == "POST /invocations"
    ingress, server = Client(404), Client(405)
    exposure = IngressExposure(ingress, server)  # type: ignore[arg-type]
    assert exposure.hiding_status("SageMaker invocations (POST /invocations)", ask) == 404
    assert exposure.hidden_route("SageMaker invocations (POST /invocations)") == "POST /invocations"


def test_a_route_is_declared_hidden_by_itself_its_path_or_a_prefix_and_nothing_else():
    declared = ["POST /v1/chat/completions", "/invocations", "/inference/*"]
    assert declared_hidden("POST /v1/chat/completions", declared)
    assert declared_hidden("POST /v1/chat/completions/", declared)  # a trailing slash is the same route
    assert declared_hidden("GET /invocations", declared) and declared_hidden("POST /invocations", declared)
    assert declared_hidden("POST /inference/v1/generate", declared)
    assert not declared_hidden("GET /v1/chat/completions", declared)  # another method than the one declared
    assert not declared_hidden("POST /v1/chat/completions/batch", declared)
    assert not declared_hidden("POST /v1/completions", declared)
    assert not declared_hidden("POST /v1/completions", [])


def test_an_undeclared_hidden_route_names_the_route_and_the_declaration_to_add():
    line = undeclared_hidden_line("POST /v1/chat/completions plain", "POST /v1/chat/completions", 404, "[] (plugin)")
    assert "the ingress does not expose POST /v1/chat/completions (it answered 404" in line
    assert 'add "POST /v1/chat/completions" to ingress.hidden_routes' in line


def test_the_gateway_key_goes_to_the_ingress_and_the_server_key_to_the_server():
    server_key, gateway_key = Secret("sk-server"), Secret("sk-gateway")
    both = Settings(url="http://vllm:8000", ingress_url="http://gw:4000", api_key=server_key)
    assert ingress_key(both) is server_key  # one key for both unless the gateway holds its own
    own = Settings(
        url="http://vllm:8000", ingress_url="http://gw:4000", api_key=server_key, ingress_api_key=gateway_key
    )
    assert (ingress_key(own), target_key(own)) == (gateway_key, server_key)
    gateway_alone = Settings(ingress_url="http://gw:4000", ingress_api_key=gateway_key)
    assert target_key(gateway_alone) is gateway_key  # given alone, the ingress is the target


class Entry:
    """An ingress answering GET /v1/models and POST /v1/completions with fixed answers."""

    base_url = "http://gw:4000"

    def __init__(self, models: tuple[int, bytes], completion: tuple[int, bytes] = (404, b"")) -> None:
        self.answers = {"/v1/models": models, "/v1/completions": completion}
        self.asked: list[str] = []

    def _answer(self, method: str, path: str) -> Response:
        self.asked.append(path)
        status, body = self.answers[path]
        return Response(method, path, status, httpx.Headers(), body, len(body), False, 0.0)

    def get(self, path: str) -> Response:
        return self._answer("GET", path)

    def post(self, path: str, body: object) -> Response:
        return self._answer("POST", path)


LISTING = b'{"object": "list", "data": [{"id": "tiny-llama"}]}'
COMPLETION = b'{"choices": [{"text": "x", "index": 0}]}'


def test_an_ingress_listing_the_model_or_completing_for_it_reaches_the_server():
    listed = Entry((200, LISTING))
    assert unreached_model(listed, "tiny-llama") is None  # type: ignore[arg-type]
    assert listed.asked == ["/v1/models"]
    hides_models = Entry((404, b""), (200, COMPLETION))  # a gateway that hides /v1/models but routes the model
    assert unreached_model(hides_models, "tiny-llama") is None  # type: ignore[arg-type]


def test_an_ingress_that_answers_404_to_everything_reaches_nothing_and_says_so_in_one_line():
    problem = unreached_model(Entry((404, b"")), "tiny-llama")  # type: ignore[arg-type]
    assert problem == (
        "the ingress at http://gw:4000 does not reach vLLM's model 'tiny-llama': GET /v1/models -> 404 (0 B in 0 ms); "
        "POST /v1/completions -> 404 (0 B in 0 ms)"
    )
    other = unreached_model(Entry((200, b'{"data": [{"id": "gpt-4o"}]}')), "tiny-llama")  # type: ignore[arg-type]
    assert other is not None and "GET /v1/models -> 200 listing ['gpt-4o']" in other
