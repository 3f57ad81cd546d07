"""Embedding payloads the embedding_limits suite sends: tiny sparse tensors that declare huge shapes.

The payload bytes are written by ``tensor_payload`` (torch.save format, no torch).
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vllm_conformance.catalogue.cases import CaseContext


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


def oversized_prompt_embeds(ctx: CaseContext) -> list[OversizedDeclaration]:
    return [
        OversizedDeclaration(entry["name"], tuple(entry["shape"]))
        for entry in ctx.expect.fact("prompt_embeds_oversized_declarations")
    ]
