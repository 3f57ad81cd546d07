"""Cases a suite test runs over, derived from the server's facts, the expectations and the settings.

A suite says ``@each("route", guarded_route_variants)``, naming the source
function itself (its feature's module, or ``catalogue/route_cases.py``), and the
plugin parametrizes the test with what it yields for this run. A source
takes one ``CaseContext`` and only builds requests; it never sends one. A
source with nothing to yield for a reason of its own raises ``NoCases``;
the plugin turns a claimed contract without cases into a failure naming why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.connection.discovery import ServerFacts
from pytest_vllm_conformance.connection.settings import Settings


class NoCases(Exception):
    """A source has nothing to run over for a reason of its own; the message says why."""


@dataclass(frozen=True)
class CaseContext:
    """What a case source may read: the target's facts (None without a server), the expectations, the settings."""

    facts: ServerFacts | None
    expect: Expectations
    settings: Settings
    # The replicas of a fleet by name, in the run's order (empty for a run with one target).
    replicas: tuple[str, ...] = ()

    @property
    def server(self) -> ServerFacts:
        if self.facts is None:
            raise NoCases("no server to read the cases from")
        return self.facts


Source = Callable[[CaseContext], Sequence[Any]]


@dataclass(frozen=True)
class Named:
    """A case that is just a name: a dashboard series, a user's lm-eval task."""

    name: str

    @property
    def id(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


def since(version: Version | None, first: str) -> bool:
    """``version`` is ``first`` or later (an unknown version: the newest rules, so yes)."""
    return version is None or version >= Version(first)
