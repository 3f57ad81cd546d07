"""Every contract of the catalogue has a proof that fails it, and a healthy server's pin.

The proofs declare what they pin (``@pytest.mark.pins``, fixtures/verdicts.py)
and are held to it while they run, so the walk below reads the declarations,
found by contract id, not by grep. A contract without a test that pins it
*failed* against a fault is a check nothing shows can fail; one without a pin
*passed* or *undecided* on a healthy server is a check nothing shows can hold.
"""

from __future__ import annotations

import pytest

from fixtures.verdicts import Pins, declared_pins, disagreements
from pytest_vllm_conformance.catalogue.contracts import load
from tests.support.proof_walk import declared_proofs, gaps, proofs_of

# Issue 40 (item 2): the gaps the first walk found and no proof closes yet. This list only shrinks: the walk
# fails on any other gap, and on a listed one that a proof has since closed. Empty since the quality and
# embeddings proofs (tests/faults/test_quality_faults.py, tests/integration/test_embeddings_on_real_vllm.py).
KNOWN_GAPS: dict[str, set[str]] = {
    "no failing proof": set(),
    "no healthy pin": set(),
}


@pytest.fixture(scope="module")
def proofs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pins]:
    return declared_proofs(tmp_path_factory.mktemp("proofs") / "proofs.json")


def test_every_contract_has_a_failing_proof_and_a_healthy_pin(proofs):
    found = gaps(list(load().contracts), proofs)
    assert not found["not in the catalogue"], f"pins markers name contracts the catalogue lacks: {found}"
    unknown = {heading: sorted(set(found[heading]) - known) for heading, known in KNOWN_GAPS.items()}
    assert not any(unknown.values()), "contracts without their proofs (fixtures/verdicts.py): " + "; ".join(
        f"{heading}: {contracts}" for heading, contracts in unknown.items() if contracts
    )
    closed = {heading: sorted(known - set(found[heading])) for heading, known in KNOWN_GAPS.items()}
    assert not any(closed.values()), f"proven now: remove them from KNOWN_GAPS: {closed}"


def test_removing_a_contracts_only_failing_proof_fails_the_walk(proofs):
    contracts = list(load().contracts)
    # A contract whose failing proofs are all one test function (its parameters are one proof).
    functions: dict[str, set[str]] = {}
    for nodeid, pins in proofs.items():
        for contract in pins.failed:
            functions.setdefault(contract, set()).add(nodeid.split("[", 1)[0])
    contract, (function,) = next((c, f) for c, f in sorted(functions.items()) if len(f) == 1)
    assert contract not in gaps(contracts, proofs)["no failing proof"]
    without = {
        nodeid: Pins(pins.failed - {contract}, pins.healthy) if nodeid.split("[", 1)[0] == function else pins
        for nodeid, pins in proofs.items()
    }
    assert contract in gaps(contracts, without)["no failing proof"]
    assert proofs_of(contract, without)["failed"] == []


def test_a_contracts_proofs_are_found_by_its_id(proofs):
    found = proofs_of("sdk.lists_model", proofs)
    assert "tests/faults/test_endpoint_faults.py::test_answers_the_sdk_cannot_use_fail_sdk" in found["failed"]
    assert "tests/integration/test_suites_on_real_vllm.py::test_all_suites_pass_on_a_default_server" in found["healthy"]


def test_parameters_declare_their_own_pins(proofs):
    wire = "tests/faults/test_wire_faults.py::test_a_broken_body_or_stream_fails_exactly_its_wire_contract"
    assert proofs[f"{wire}[[DONE] dropped]"].failed == {"wire.chat_stream_framing"}
    assert proofs[f"{wire}[an error body without error.type]"].failed == {"wire.error_shape"}


# ---- a declaration cannot lie -----------------------------------------------


@pytest.mark.parametrize(
    ("declared", "pinned", "problem"),
    [
        (Pins(), Pins(failed={"sdk.lists_model"}), "pinned failed but not declared"),
        (Pins(failed={"sdk.lists_model"}), Pins(), "declared in pins(failed=...) but never pinned failed"),
        (
            Pins(failed={"sdk.lists_model"}, healthy={"sdk.lists_model"}),
            Pins(failed={"sdk.lists_model"}),
            "declared in pins(healthy=...) but never pinned passed or undecided",
        ),
        (Pins(healthy={"sdk.lists_model"}), Pins(), "never pinned passed or undecided"),
    ],
)
def test_a_declaration_that_differs_from_the_pins_is_named(declared, pinned, problem):
    (found,) = disagreements(declared, pinned)
    assert problem in found and "sdk.lists_model" in found


def test_what_is_pinned_healthy_elsewhere_need_not_be_declared():
    # A fault proof pins the contracts its fault leaves alone passed: it declares only what it shows failing.
    assert disagreements(Pins(failed={"a.x"}), Pins(failed={"a.x"}, healthy={"a.y"})) == []


def test_assert_verdicts_and_failed_checks_record_what_they_pin(tmp_path):
    from fixtures import verdicts

    junit = tmp_path / "junit.xml"
    junit.write_text(
        "<testsuites><testsuite>"
        + "".join(
            f'<testcase name="test_{n}[{case}]"><properties><property name="vllm_contract" value="a.{n}"/>'
            f"</properties>{body}</testcase>"
            for n, case, body in (
                ("x", "one", '<failure message="broken">broken</failure>'),
                ("x", "two", ""),
                ("y", "one", ""),
                ("z", "one", '<skipped message="undecided: nothing"/>'),
            )
        )
        + "</testsuite></testsuites>"
    )
    pinned = verdicts.stop_pinning()  # this test's own record, set aside and put back below
    verdicts.start_pinning()
    try:
        verdicts.assert_verdicts(junit, {"a.x": "passed", "a.y": "passed", "a.z": "skipped"}, failed={"a.x[one]"})
        assert verdicts.failed_checks(junit)["a.x[one]"] == "broken"
        verdicts.assert_failures_say(junit, {"a.x[one]": ("bro", "ken")})
        with pytest.raises(AssertionError, match="'mended' not in 'broken'"):
            verdicts.assert_failures_say(junit, {"a.x[one]": "mended"})
    finally:
        recorded = verdicts.stop_pinning()
        verdicts.start_pinning()
        verdicts._running = pinned
    assert recorded == Pins(failed={"a.x"}, healthy={"a.y"})


def test_the_marker_takes_ids_keys_and_verdict_dicts(pytester):
    item = pytester.getitem(
        """
        import pytest
        @pytest.mark.pins(failed={"a.x[case]"}, healthy={"a.y": "passed", "a.z": "not claimed"})
        @pytest.mark.pins(failed={"a.w": {"failed": 1, "passed": 2}, "a.v": "passed"}, healthy=("a.u",))
        def test_func():
            pass
        """
    )
    assert declared_pins(item) == Pins(failed={"a.x", "a.w"}, healthy={"a.y", "a.u"})
