"""The one sender of /tokenize: what it sends, and one exception whatever went wrong."""

from __future__ import annotations

import httpx
import pytest

from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids


def _client(handler) -> BoundedClient:
    client = BoundedClient("http://tokenizer.test", None, 5.0, 1 << 20)
    client._async._client = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://tokenizer.test")
    return client


def test_sends_the_prompt_or_the_messages_with_the_plugin_run():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.read())
        return httpx.Response(200, json={"tokens": [1, 2, 3], "count": 3})

    client = _client(handler)
    assert token_ids(client, "m", prompt="hi", add_special_tokens=False) == [1, 2, 3]
    assert token_ids(client, "m", messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True) == [1, 2, 3]
    assert b'"prompt":"hi"' in seen[0].replace(b" ", b"") and b'"add_special_tokens":false' in seen[0].replace(
        b" ", b""
    )
    assert b'"messages"' in seen[1] and b'"add_generation_prompt":true' in seen[1].replace(b" ", b"")
    assert b"add_special_tokens" not in seen[1]


@pytest.mark.parametrize(
    "answer, words",
    [
        (httpx.Response(403, json={"detail": "Forbidden"}), "403"),
        (httpx.Response(200, json={"count": 3}), "did not return tokens"),
        (httpx.Response(200, json={"tokens": [1]}), "fewer than 2"),
    ],
)
def test_any_failure_is_one_exception_that_keeps_the_answer(answer, words):
    client = _client(lambda request: answer)
    with pytest.raises(TokenizeUnavailable, match=words) as raised:
        token_ids(client, "m", prompt="hi", minimum=2)
    assert raised.value.response is not None and raised.value.response.status == answer.status_code
