"""Malformed requests for the validation_bounds checks: a list field filled with wrong-typed items.

The routes and fields are contract data (fact ``malformed_list_requests``);
each is sent only where the server serves its route.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext


@dataclass(frozen=True)
class MalformedRequest:
    """A request whose list field holds ``size`` items of the wrong type."""

    path: str
    field: str
    item: Any
    size: int
    base: dict[str, Any] = dataclass_field(default_factory=dict, hash=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.path} {self.field}x{self.size}"

    def __str__(self) -> str:
        return self.id

    def body(self, model: str) -> dict[str, Any]:
        return {"model": model, **self.base, self.field: [self.item] * self.size}


def malformed_list_requests(ctx: CaseContext) -> list[MalformedRequest]:
    expect, facts = ctx.expect, ctx.server
    sizes = expect.fact("malformed_list_sizes")
    return [
        MalformedRequest(entry["path"], entry["field"], entry["item"], size, entry.get("base", {}))
        for entry in expect.fact("malformed_list_requests")
        if facts.serves("POST", entry["path"])
        for size in sizes
    ]


def padded_completion(model: str, size: int) -> dict[str, Any]:
    """A one-token completion request whose JSON (as the client sends it: ``json.dumps``) is exactly ``size`` bytes,
    padded in OpenAI's ``user`` field, which every release takes and no answer depends on."""
    body: dict[str, Any] = {"model": model, "prompt": "Hello", "max_tokens": 1, "user": ""}
    room = size - len(json.dumps(body).encode())
    if room < 0:
        raise ValueError(f"a completion request for {model!r} needs more than {size} bytes")
    body["user"] = "x" * room
    return body
