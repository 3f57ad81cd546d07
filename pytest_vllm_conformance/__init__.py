"""pytest-vllm-conformance: conformance suites for live vLLM servers.

The public face is small: a suite test names the contract it checks with
``contract`` and the cases it runs over with ``each``, reads a catalogue
fact through a ``fact_fixture``, ends a check it cannot decide with
``undecided``, and one that saw the release's known departure from what
clients need with ``known_departure``. The package holds the floors every feature
stands on (``connection/``, ``protocol/``, ``catalogue/``, ``reporting/``,
``observed/``, ``plugin/``); each feature is a folder of the suites
(``suites/<feature>/``: its contracts, its test, its machinery).

The ``vllm-conformance`` command imports this package before pytest starts,
too early for pytest's assertion rewriting, which then warns on every run
from the wheel; the package's own code asserts nothing a test reads, so it
opts out: PYTEST_DONT_REWRITE.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import pytest

__version__ = "0.1.0"

#: The outcome of a contract that does not apply to this server or profile,
#: decided by the plugin before the test runs (never by the test).
NOT_CLAIMED = "not claimed"

#: The outcome of a check that ran and could not decide (too noisy, cut short,
#: nothing to judge): its own outcome, never a pass, and a claimed feature
#: with one is partial.
UNDECIDED = "undecided"

#: The outcome of a check that saw the release do what its catalogue fact marks
#: as a known departure from what clients need: reported as such, never a pass.
KNOWN_DEPARTURE = "known departure"

CONTRACT_MARKER = "vllm_contract"
EACH_MARKER = "vllm_each"


def contract(contract_id: str) -> pytest.MarkDecorator:
    """Marks a test with the catalogue contract it checks: ``@contract("auth.guarded_route_accepts_key")``."""
    if not isinstance(contract_id, str) or contract_id.count(".") != 1:
        raise TypeError(f"contract() takes a catalogue id like 'feature.name', not {contract_id!r}")
    return getattr(pytest.mark, CONTRACT_MARKER)(contract_id)


def each(argname: str, source: Callable[..., Any]) -> pytest.MarkDecorator:
    """Runs a test once per case ``source`` yields for this run: ``@each("route", guarded_route_variants)``.

    ``source`` is the case-source function itself (one ``CaseContext`` in, a
    list of cases out), so that "go to definition" finds it.
    """
    if not isinstance(argname, str) or not argname.isidentifier():
        raise TypeError(f"each() takes the test's argument name first, not {argname!r}")
    if not callable(source):
        raise TypeError(f"each() takes the case-source function itself, not {source!r}")
    return getattr(pytest.mark, EACH_MARKER)(argname, source)


def fact_fixture(name: str) -> Any:
    """A module-scoped fixture holding the catalogue fact ``name``, as the run's expectations give it:
    ``refusal = fact_fixture("context_limit_refusal")`` in a suite's test module."""

    @pytest.fixture(scope="module")
    def catalogue_fact(vllm_expect: Any) -> Any:
        return vllm_expect.fact(name)

    return catalogue_fact


class Undecided(pytest.skip.Exception):  # type: ignore[name-defined]
    """Raised by ``undecided``: pytest sees a skip, the plugin reports the outcome *undecided*."""


def undecided(reason: str) -> NoReturn:
    """Ends the check as *undecided*: it ran, and what it saw cannot decide the contract either way.

    ``reason`` names what was missing or too noisy ("a round pair shows no such
    slowdown"). A check that decided passes or fails; one that was never
    claimed is the plugin's decision, not the test's.
    """
    raise Undecided(f"{UNDECIDED}: {reason}")


class KnownDeparture(pytest.skip.Exception):  # type: ignore[name-defined]
    """Raised by ``known_departure``: pytest sees a skip, the plugin reports the outcome *known departure*."""


def known_departure(departure: Any, saw: str) -> NoReturn:
    """Ends the check as a *known departure*: the server did what the release's fact says (``saw``), which is not
    what clients need. ``departure`` is ``vllm_expect.departure(fact)``; a release that does what clients need
    has none, and its check goes on to pass or fail."""
    raise KnownDeparture(f"{KNOWN_DEPARTURE}: {saw}: {departure}")


__all__ = [
    "KNOWN_DEPARTURE",
    "NOT_CLAIMED",
    "UNDECIDED",
    "KnownDeparture",
    "Undecided",
    "__version__",
    "contract",
    "each",
    "fact_fixture",
    "known_departure",
    "undecided",
]
