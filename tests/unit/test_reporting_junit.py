"""The JUnit file under each family: valid xunit2, the contract in system-out, properties, secrets."""

import xml.etree.ElementTree as ET

import pytest

from tests.unit.reporting_stand_ins import STAND_INS

# junit-10.xsd, the schema pytest validates its xunit2 output against: what a
# <testcase> may hold and which attributes it may carry.
XUNIT2_TESTCASE_CHILDREN = {"skipped", "error", "failure", "system-out", "system-err"}
XUNIT2_TESTCASE_ATTRIBUTES = {"name", "time", "classname", "group"}


def assert_valid_xunit2(path):
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        assert {child.tag for child in case} <= XUNIT2_TESTCASE_CHILDREN, ET.tostring(case)[:300]
        assert set(case.attrib) <= XUNIT2_TESTCASE_ATTRIBUTES
    for suite in root.iter("testsuite"):
        assert {child.tag for child in suite} <= {"testsuite", "properties", "testcase", "system-out", "system-err"}


def cases_by_name(path):
    return {case.get("name"): case for case in ET.parse(path).getroot().iter("testcase")}


def test_xunit2_junit_is_valid_and_keeps_the_contract_in_system_out(pytester, clean_env):
    pytester.makepyfile(test_stand_ins=STAND_INS)
    pytester.runpytest("-p", "no:cacheprovider", "-o", "junit_family=xunit2", "--junitxml=junit.xml")
    assert_valid_xunit2(pytester.path / "junit.xml")
    cases = cases_by_name(pytester.path / "junit.xml")
    failed = cases["test_accepts_key[POST /v1/completions]"]
    assert failed.find("failure").get("message").startswith("AssertionError: POST /v1/completions refused")
    assert failed.find("system-out").text.splitlines()[:2] == [
        "vllm_contract: auth.guarded_route_accepts_key",
        "vllm_feature: auth",
    ]
    assert cases["test_not_a_contract"].find("system-out") is None


def test_xunit2_system_out_merges_with_captured_output(pytester, clean_env):
    pytester.makepyfile(
        """
        from pytest_vllm_conformance import contract

        @contract("discovery.max_model_len_published")
        def test_prints(vllm_evidence):
            print("captured line")
            vllm_evidence.judged(1, "stand-in checks")
        """
    )
    pytester.runpytest("-p", "no:cacheprovider", "-o", "junit_logging=system-out", "--junitxml=junit.xml")
    assert_valid_xunit2(pytester.path / "junit.xml")
    (case,) = cases_by_name(pytester.path / "junit.xml").values()
    outputs = case.findall("system-out")
    assert len(outputs) == 1
    assert outputs[0].text.startswith("vllm_contract: discovery.max_model_len_published\nvllm_feature: discovery\n")
    assert "captured line" in outputs[0].text


@pytest.mark.parametrize("family", ["xunit1", "legacy"])
def test_xunit1_keeps_per_test_properties(pytester, clean_env, family):
    pytester.makepyfile(test_stand_ins=STAND_INS)
    pytester.runpytest("-p", "no:cacheprovider", "-o", f"junit_family={family}", "--junitxml=junit.xml")
    case = cases_by_name(pytester.path / "junit.xml")["test_health"]
    properties = {p.get("name"): p.get("value") for p in case.find("properties")}
    assert properties == {
        "vllm_contract": "discovery.max_model_len_published",
        "vllm_feature": "discovery",
        "vllm_evidence": "judged: 1 stand-in check",
    }
    assert case.find("system-out") is None


def test_other_plugins_properties_are_left_where_pytest_put_them(pytester, clean_env):
    pytester.makepyfile(
        """
        from pytest_vllm_conformance import contract

        @contract("discovery.max_model_len_published")
        def test_records(record_property, vllm_evidence):
            record_property("ticket", "OPS-1")
            vllm_evidence.judged(1, "stand-in checks")
        """
    )
    pytester.runpytest("-p", "no:cacheprovider", "--junitxml=junit.xml", "-W", "ignore::pytest.PytestWarning")
    (case,) = cases_by_name(pytester.path / "junit.xml").values()
    assert [(p.get("name"), p.get("value")) for p in case.find("properties")] == [("ticket", "OPS-1")]
    assert case.find("system-out").text.startswith("vllm_contract: discovery.max_model_len_published\n")


def test_junit_suite_properties_name_the_result_and_the_report(pytester, clean_env):
    pytester.makepyfile(test_stand_ins=STAND_INS)
    pytester.runpytest("-p", "no:cacheprovider", "--junitxml=junit.xml", "--vllm-report=r.yaml")
    suite = ET.parse(pytester.path / "junit.xml").getroot().find("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties == {"vllm_conformance_result": "failure", "vllm_report": str(pytester.path / "r.yaml")}


def test_junit_counts_and_times_survive_a_secret_of_digits(pytester, clean_env):
    pytester.makepyfile(test_stand_ins=STAND_INS)
    # A key of digits is masked where it stands alone, never inside a number: tests="10" stays.
    # (A key shorter than 8 characters, "1", is refused: tests/unit/test_every_input.py.)
    pytester.runpytest("-p", "no:cacheprovider", "--vllm-api-key=10000000", "--junitxml=junit.xml")
    suite = ET.parse(pytester.path / "junit.xml").getroot().find("testsuite")
    assert suite.get("tests") == "10" and float(suite.get("time")) >= 0
    assert_valid_xunit2(pytester.path / "junit.xml")
