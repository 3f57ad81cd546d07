"""The wire checks' cases: the requests each contract judges, as the server and the contract data allow them.

Each request is sent once per run and judged by every contract that reads
it (its shape, its framing).
"""

from __future__ import annotations

from pytest_vllm_conformance.catalogue.cases import CaseContext, NoCases
from pytest_vllm_conformance.observed.wire_requests import RESPONSES, Exchange
from pytest_vllm_conformance.protocol.generation_routes import CHAT, CLASSIFY, COMPLETIONS, EMBEDDINGS


def _generation(path: str, answer: str, *, stream: bool) -> list[Exchange]:
    if stream:
        return [
            Exchange("stream usage logprobs", path, answer, stream=True, include_usage=True, logprobs=True),
            Exchange("stream", path, answer, stream=True),
        ]
    return [Exchange("plain", path, answer), Exchange("logprobs", path, answer, logprobs=True)]


def completion_exchanges(ctx: CaseContext) -> list[Exchange]:
    return _generation(COMPLETIONS.path, "completion", stream=False)


def completion_stream_exchanges(ctx: CaseContext) -> list[Exchange]:
    return _generation(COMPLETIONS.path, "completion_chunk", stream=True)


def chat_exchanges(ctx: CaseContext) -> list[Exchange]:
    return _generation(CHAT.path, "chat_completion", stream=False)


def chat_stream_exchanges(ctx: CaseContext) -> list[Exchange]:
    return _generation(CHAT.path, "chat_chunk", stream=True)


def embedding_exchanges(ctx: CaseContext) -> list[Exchange]:
    model = ctx.expect.declared("wire", "embedding_model")
    if model.value is None:
        raise NoCases("no wire.embedding_model declared")
    return [Exchange(f"model {model.value}", EMBEDDINGS, "embeddings", extra={"model": model.value})]


def continuous_usage_exchanges(ctx: CaseContext) -> list[Exchange]:
    """A streamed completion and chat completion with usage on every chunk, and logprobs to count tokens by."""
    fact = ctx.expect.fact("wire_continuous_usage")
    if not fact:
        raise NoCases(f"the contract data has no stream_options.continuous_usage_stats for {ctx.expect.version_label}")
    options = {key: value for key, value in fact["stream_options"].items() if key != "include_usage"}
    return [
        Exchange(
            "stream continuous usage logprobs",
            path,
            answer,
            stream=True,
            include_usage=True,
            logprobs=True,
            stream_options=options,
        )
        for path, answer in ((COMPLETIONS.path, "completion_chunk"), (CHAT.path, "chat_chunk"))
    ]


def _responses(ctx: CaseContext) -> None:
    if not ctx.server.serves("POST", RESPONSES):
        raise NoCases(f"the server does not serve POST {RESPONSES}")


def responses_exchanges(ctx: CaseContext) -> list[Exchange]:
    _responses(ctx)
    return [Exchange("plain", RESPONSES, "responses")]


def responses_stream_exchanges(ctx: CaseContext) -> list[Exchange]:
    _responses(ctx)
    return [Exchange("stream", RESPONSES, "responses_event", stream=True)]


UNKNOWN_MODEL = "no-such-model-wire-probe"


def error_exchanges(ctx: CaseContext) -> list[Exchange]:
    """A request for a model the server does not serve, on the first model route it serves (a classifier's or a
    cross-encoder's /classify, where it serves no other)."""
    paths = (CHAT.path, COMPLETIONS.path, EMBEDDINGS, CLASSIFY)
    for path in paths:
        if ctx.server.serves("POST", path):
            return [Exchange("unknown model", path, "error", extra={"model": UNKNOWN_MODEL})]
    raise NoCases(f"the server serves none of {', '.join(paths)}")
