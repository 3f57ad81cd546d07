"""The APIs whose body takes vLLM's per-request watermark opt-out, and how the suite samples from each.

Which APIs a version has, where the field sits and whether token ids come
back are contract data (fact ``watermark_opt_out_apis``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext, since
from pytest_vllm_conformance.protocol import generation_routes

# The shapes (fact ``watermark_opt_out_apis``) whose answers the generation route table reads.
ROUTE_OF_SHAPE = {
    "completion": generation_routes.COMPLETIONS,
    "chat": generation_routes.CHAT,
    "chat_batch": generation_routes.CHAT,
    "responses": generation_routes.RESPONSES,
    "messages": generation_routes.MESSAGES,
}


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
        bodies: dict[str, dict[str, Any]] = {
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
        route = ROUTE_OF_SHAPE.get(self.shape)
        if route is not None:
            return route.text(payload)
        try:
            if self.shape == "cohere_chat":
                return "".join(part["text"] for part in payload["message"]["content"] if part.get("type") == "text")
        except (KeyError, IndexError, TypeError):
            return None
        return None


def watermark_opt_out_apis(ctx: CaseContext) -> list[GenerationApi]:
    """The APIs of this server's version that accept the opt-out and that this server serves."""
    facts, expect = ctx.server, ctx.expect
    version = facts.parsed_version
    scale_out = expect.declared("endpoint", "scale_out").value
    apis = []
    for entry in expect.fact("watermark_opt_out_apis"):
        if not since(version, entry["since"]) or not facts.serves("POST", entry["path"]):
            continue
        if entry.get("needs") == "scale_out" and scale_out != "enabled":
            continue  # 0.32+ mount a 403 stub there while scale-out is off: nothing to sample
        returns_ids = "token_ids_since" in entry and since(version, entry["token_ids_since"])
        apis.append(
            GenerationApi(
                entry["api"],
                entry["path"],
                entry["shape"],
                tuple(entry["field"]),
                returns_ids,
                entry.get("form", False),
            )
        )
    return apis
