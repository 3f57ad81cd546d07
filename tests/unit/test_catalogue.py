"""The contract data is whole: every fact answers for every release we
cover, and every contract has exactly one test in the suites."""

import re
from pathlib import Path

import pytest
from packaging.version import Version

from pytest_vllm_conformance.catalogue import contracts

SUITES = Path(__file__).resolve().parents[2] / "suites"
COVERED_RELEASES = [Version(f"0.{minor}.0") for minor in range(28, 34)]
CONTRACT_USE = re.compile(r"""@contract\(\s*["']([\w.]+)["']""")


@pytest.fixture(scope="module")
def catalogue():
    return contracts.load()


@pytest.mark.parametrize("version", COVERED_RELEASES, ids=str)
def test_every_fact_answers_for_every_covered_release(catalogue, version):
    missing = []
    for name in catalogue.facts:
        try:
            catalogue.fact(name, version)
        except contracts.NoFact:
            missing.append(name)
    assert not missing, f"contracts.yaml has no value for vLLM {version} of: {missing}"


def test_every_contract_is_checked_by_exactly_one_suite_test(catalogue):
    uses: dict[str, list[str]] = {}
    for module in sorted(SUITES.glob("test_*.py")):
        for contract_id in CONTRACT_USE.findall(module.read_text()):
            uses.setdefault(contract_id, []).append(module.name)
    unknown = sorted(set(uses) - set(catalogue.contracts))
    unchecked = sorted(set(catalogue.contracts) - set(uses))
    repeated = {cid: mods for cid, mods in uses.items() if len(mods) > 1}
    assert not unknown, f"suites name contracts missing from contracts.yaml: {unknown}"
    assert not unchecked, f"contracts without a suite test: {unchecked}"
    assert not repeated, f"contracts checked twice: {repeated}"


def test_every_contract_lives_in_the_module_of_its_feature(catalogue):
    for module in SUITES.glob("test_*.py"):
        for contract_id in CONTRACT_USE.findall(module.read_text()):
            feature = catalogue.contract(contract_id).feature
            assert module.name == f"test_{feature}.py", f"{contract_id} ({feature}) is checked in {module.name}"


def test_every_suite_test_is_named_after_its_contract():
    """``auth.unguarded_route_is_public`` is checked by ``test_unguarded_route_is_public``: one name per contract."""
    contract_then_def = re.compile(r"""@contract\(\s*["']([\w.]+)["']\)(?:\n@[^\n]+)*\ndef (\w+)\(""")
    for module in SUITES.glob("test_*.py"):
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
    problems = [
        f"{list(e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(yaml_data.load_shipped((here / contracts.CATALOGUE_FILE).read_text()))
    ]
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
