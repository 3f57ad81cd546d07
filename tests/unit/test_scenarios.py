"""The healthy scenarios' tables are the catalogue's claims plus what only a real run shows."""

import pytest

from pytest_vllm_conformance.catalogue import contracts
from tests.support.scenarios import HARDENED, PLAIN, POOLING, Scenario


def test_every_scenario_names_every_contract_of_the_catalogue():
    for scenario in (PLAIN, HARDENED, POOLING):
        assert set(scenario.verdicts()) == set(contracts.load().contracts)


def test_a_contract_claimed_by_an_input_is_not_claimed_without_it():
    assert PLAIN.verdicts("auth")["auth.guarded_route_accepts_key"] == "not claimed"
    assert HARDENED.verdicts("auth")["auth.guarded_route_accepts_key"] == "passed"  # the key is given
    assert POOLING.verdicts("sampling")["sampling.seed_reproducible"] == "not claimed"  # no generation route


def test_case_counts_apply_only_where_the_contract_is_claimed():
    assert PLAIN.verdicts("scale_out") == {
        "scale_out.enabled_routes_served": "not claimed",
        "scale_out.disabled_routes_refused": {"passed": 8},
    }


def test_a_scenario_naming_what_the_catalogue_lacks_is_refused():
    with pytest.raises(KeyError, match="no_such.contract"):
        Scenario("stale", None, cases={"no_such.contract": "passed"}).verdicts()
