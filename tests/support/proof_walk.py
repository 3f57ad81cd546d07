"""Which tests prove which contract: the ``pins`` declarations of every test in tests/, by contract id.

``declared_proofs`` collects tests/ in a pytest process of its own (collection
only: no server starts, no vLLM is imported) with this module as a plugin, which
reads each item's ``pins`` markers. ``gaps`` then walks the catalogue.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.verdicts import Pins, declared_pins

REPO = Path(__file__).resolve().parents[2]
OUT_ENV = "VLLM_CONFORMANCE_TEST_PROOFS_OUT"

_found: dict[str, dict[str, list[str]]] = {}


def pytest_itemcollected(item: pytest.Item) -> None:
    pins = declared_pins(item)
    if pins.failed or pins.healthy:
        _found[item.nodeid] = {"failed": sorted(pins.failed), "healthy": sorted(pins.healthy)}


def pytest_collection_finish(session: pytest.Session) -> None:
    Path(os.environ[OUT_ENV]).write_text(json.dumps(_found))


def declared_proofs(out: Path) -> dict[str, Pins]:
    """Test node id -> what it declares it pins, for every test in tests/ that declares anything.

    Opt-in proofs (deselected unless asked for) are collected before they are deselected: they are proofs too.
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTEST_", "COV_"))}
    env[OUT_ENV] = str(out)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "tests.support.proof_walk",
    ]
    done = subprocess.run([*command, "tests"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"collecting tests/ failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return {
        nodeid: Pins(failed=set(pins["failed"]), healthy=set(pins["healthy"]))
        for nodeid, pins in json.loads(out.read_text()).items()
    }


def gaps(contracts: list[str], proofs: dict[str, Pins]) -> dict[str, list[str]]:
    """What the declarations leave unproven: each contract without a failing proof, without a healthy pin,
    and any declared id the catalogue does not have."""
    failed = {contract for pins in proofs.values() for contract in pins.failed}
    healthy = {contract for pins in proofs.values() for contract in pins.healthy}
    named = failed | healthy
    return {
        "no failing proof": [contract for contract in contracts if contract not in failed],
        "no healthy pin": [contract for contract in contracts if contract not in healthy],
        "not in the catalogue": sorted(named - set(contracts)),
    }


def proofs_of(contract: str, proofs: dict[str, Pins]) -> dict[str, list[str]]:
    """A contract's proofs by its id: the tests that pin it failed, and those that pin it healthy."""
    return {
        "failed": sorted(nodeid for nodeid, pins in proofs.items() if contract in pins.failed),
        "healthy": sorted(nodeid for nodeid, pins in proofs.items() if contract in pins.healthy),
    }


def main() -> None:
    """``python -m tests.support.proof_walk``: the catalogue's gaps, one contract a line under each heading."""
    import tempfile

    from pytest_vllm_conformance.catalogue.contracts import load

    with tempfile.TemporaryDirectory() as scratch:
        proofs = declared_proofs(Path(scratch) / "proofs.json")
    for heading, contracts in gaps(list(load().contracts), proofs).items():
        print(f"# {heading} ({len(contracts)})", *contracts, "", sep="\n")


if __name__ == "__main__":
    main()
