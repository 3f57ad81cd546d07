"""Each release's outcome per contract, over its flag sets: what the matrix pages and the heatmap both draw."""

from __future__ import annotations

import functools

from atlas.plan import FLAG_SETS
from pytest_vllm_conformance.catalogue import contracts

# One catalogue for a whole rendering: the matrix asks it once a cell.
load = functools.cache(contracts.load)

# Outcomes, most telling first: a release's cell shows the most telling one over the flag sets.
OUTCOMES = ("failed", "undecided", "known departure", "passed", "not claimed", "not available", "not measured")


def cell(data: dict, release: str, contract: str) -> tuple[str, str]:
    """The release's outcome for a contract over its flag sets (the most telling), and its line of reason."""
    outcomes = []
    for flags in FLAG_SETS:
        record = data["records"].get(f"{release}/{flags.name}")
        if record and record.get("status") == "measured" and contract in record["contracts"]:
            outcome = record["contracts"][contract]
            # A pooling server's "not claimed" of a generation contract (or a generation server's of a pooling
            # one) is the server's kind, not the release's: a contract no server of its kind measured is not measured.
            if outcome["outcome"] == "not claimed" and flags.pooling != contract.startswith("pooling."):
                continue
            outcomes.append((flags.name, outcome))
    if not outcomes:
        return "not measured", ""
    best = min(OUTCOMES.index(o["outcome"]) for _, o in outcomes)
    chosen = [(name, o) for name, o in outcomes if OUTCOMES.index(o["outcome"]) == best]
    outcome = OUTCOMES[best]
    names = ", ".join(name for name, _ in chosen)
    reason = chosen[0][1]["reason"]
    if outcome == "passed":
        return outcome, names
    return outcome, f"{names}: {reason}" if reason else names


def contract_ids(data: dict) -> dict[str, list[str]]:
    """Every contract of the catalogue by feature, as the matrix rows go."""
    return {feature: [c.id for c in contracts] for feature, contracts in load().by_feature().items() if contracts}
