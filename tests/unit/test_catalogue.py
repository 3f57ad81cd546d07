"""The contract data is whole: every fact answers for every release we
cover, and every contract has exactly one test in the suites."""

import re
from pathlib import Path

import pytest
from packaging.version import Version

from pytest_vllm_conformance.catalogue import contracts
from pytest_vllm_conformance.connection.discovery import parse_version

SUITES = Path(__file__).resolve().parents[2] / "suites"
COVERED_RELEASES = [Version(f"0.{minor}.0") for minor in range(28, 34)]
# Newer than the newest facts: judged by them, so every fact's last range must be open-ended.
NEWER_RELEASES = [Version("0.33.4"), Version("0.34.0"), Version("1.0.0")]
CONTRACT_USE = re.compile(r"""@contract\(\s*["']([\w.]+)["']""")


@pytest.fixture(scope="module")
def catalogue():
    return contracts.load()


def test_the_covered_releases_are_the_catalogues(catalogue):
    assert (catalogue.releases.oldest, catalogue.releases.newest) == (COVERED_RELEASES[0], Version("0.33"))


@pytest.mark.parametrize("version", COVERED_RELEASES + NEWER_RELEASES, ids=str)
def test_every_fact_answers_for_every_covered_or_newer_release(catalogue, version):
    missing = []
    for name in catalogue.facts:
        try:
            catalogue.fact(name, version)
        except contracts.NoFact:
            missing.append(name)
    assert not missing, f"the catalogue's facts have no value for vLLM {version} of: {missing}"


def test_a_release_older_than_the_catalogue_has_no_facts_and_says_what_is_covered(catalogue):
    with pytest.raises(contracts.ReleaseNotCovered) as raised:
        catalogue.fact("route_table", Version("0.27.1"))
    assert str(raised.value) == (
        "vLLM 0.27.1 is older than the contract catalogue, which covers vLLM 0.28 to 0.33 "
        "(and newer releases by the newest facts): nothing is known of 0.27.1's contracts"
    )


@pytest.mark.parametrize(
    ("reported", "judgement"),
    [
        ("0.32.0", "0.32.0: within the catalogue (vLLM 0.28 to 0.33)"),
        ("0.32.0+cpu", "0.32.0+cpu, judged as 0.32.0 (its base release): within the catalogue (vLLM 0.28 to 0.33)"),
        ("0.28.0rc1", "0.28.0rc1, judged as 0.28.0 (its base release): within the catalogue (vLLM 0.28 to 0.33)"),
        (
            "0.32.1.dev3+g1a2b3c",
            "0.32.1.dev3+g1a2b3c, judged as 0.32.1 (its base release): within the catalogue (vLLM 0.28 to 0.33)",
        ),
        (
            "0.34.0",
            "0.34.0: newer than the catalogue (vLLM 0.28 to 0.33), so judged by the newest facts (0.33), "
            "which 0.34.0 may have changed",
        ),
        (None, "version unknown: judged by the newest facts (0.33); the catalogue covers vLLM 0.28 to 0.33"),
    ],
)
def test_a_release_is_judged_by_its_base_release_and_a_newer_one_by_the_newest_facts(catalogue, reported, judgement):
    assert catalogue.releases.judgement(reported, parse_version(reported)) == judgement


def test_a_pre_release_of_a_covered_release_is_claimed_like_the_release(catalogue):
    contract = catalogue.contract("discovery.version_parses")
    assert all(contract.applies_to(parse_version(text)) for text in ("0.28.0rc1", "0.28.0.dev1", "0.32.1.dev3+g1a2b"))


def test_every_contract_is_checked_by_exactly_one_suite_test(catalogue):
    uses: dict[str, list[str]] = {}
    for module in sorted(SUITES.rglob("test_*.py")):
        for contract_id in CONTRACT_USE.findall(module.read_text()):
            uses.setdefault(contract_id, []).append(module.name)
    unknown = sorted(set(uses) - set(catalogue.contracts))
    unchecked = sorted(set(catalogue.contracts) - set(uses))
    repeated = {cid: mods for cid, mods in uses.items() if len(mods) > 1}
    assert not unknown, f"suites name contracts missing from every suites/<feature>/contracts.yaml: {unknown}"
    assert not unchecked, f"contracts without a suite test: {unchecked}"
    assert not repeated, f"contracts checked twice: {repeated}"


def test_every_contract_lives_in_the_module_of_its_feature(catalogue):
    for module in SUITES.rglob("test_*.py"):
        for contract_id in CONTRACT_USE.findall(module.read_text()):
            feature = catalogue.contract(contract_id).feature
            assert module.name == f"test_{feature}.py", f"{contract_id} ({feature}) is checked in {module.name}"
            assert module.parent.name in (feature, "suites"), f"{contract_id} is checked outside suites/{feature}/"


def test_every_wire_contract_names_the_document_it_holds_the_server_to(catalogue):
    # A wire shape is someone's published shape: a failure is read against that document.
    unsourced = [c.id for c in catalogue.contracts.values() if c.feature in ("wire", "agent_loops") and not c.holds_to]
    assert not unsourced


def test_every_suite_test_is_named_after_its_contract():
    """``auth.unguarded_route_is_public`` is checked by ``test_unguarded_route_is_public``: one name per contract."""
    contract_then_def = re.compile(r"""@contract\(\s*["']([\w.]+)["']\)(?:\n@[^\n]+)*\ndef (\w+)\(""")
    for module in SUITES.rglob("test_*.py"):
        for contract_id, function in contract_then_def.findall(module.read_text()):
            assert function == "test_" + contract_id.split(".", 1)[1], f"{module.name}: {function} checks {contract_id}"


def _schema():
    import json

    return json.loads((Path(contracts.__file__).with_name("contracts.schema.json")).read_text())


def test_the_catalogue_files_follow_their_schema():
    """Typed facts: every contract, declaration and fact range has its fields, and every fact names its source."""
    import jsonschema

    from pytest_vllm_conformance.catalogue import yaml_data

    here = Path(contracts.__file__).parent
    schema = _schema()
    validator = jsonschema.Draft202012Validator(schema)
    problems = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(contracts.raw_catalogue())]
    assert not problems, problems[:10]
    routes = jsonschema.Draft202012Validator({**schema, **schema["$defs"]["route_tables"]})
    problems = [
        f"{list(e.absolute_path)}: {e.message}"
        for e in routes.iter_errors(yaml_data.load_shipped((here / contracts.ROUTE_TABLES_FILE).read_text()))
    ]
    assert not problems, problems[:10]


def test_every_route_condition_is_defined_for_its_release(catalogue):
    for version in COVERED_RELEASES:
        defined = set(catalogue.fact("route_conditions", version))
        used = {route["when"] for route in catalogue.fact("route_table", version)}
        assert used <= defined, (version, used - defined)


def test_every_declared_default_fact_exists(catalogue):
    for key, declaration in catalogue.declarations.items():
        if declaration.fact is not None:
            assert declaration.fact in catalogue.facts, key
