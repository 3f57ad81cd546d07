"""Known departures and predicted facts: what a release does that clients do not need is reported as such.

A fact's range may say what clients need that its releases do not do (``departs_from``); a contract naming that
fact (``departs_on``) ends as a *known departure* where it sees the fact's value: checked, never a pass, and
never a failure of the run. A fact is *read* for a release only when its source names that release's series
or a newer one; otherwise it is *predicted*, and the run says how many of its facts were.
"""

from __future__ import annotations

import dataclasses

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fixtures.verdicts import contract_runs
from pytest_vllm_conformance.catalogue import contracts
from tests.unit.reporting_stand_ins import read_report


@pytest.fixture(scope="module")
def catalogue():
    return contracts.load()


@pytest.mark.parametrize(
    ("source", "series"),
    [
        ("vllm/x.py at v0.32.0 (f)", {(0, 32)}),
        ("vllm/x.py at v0.28.0-v0.31.0 (f)", {(0, 28), (0, 29), (0, 30), (0, 31)}),
        ("vllm/x.py at v0.28.0 and v0.32.0", {(0, 28), (0, 32)}),
        ("vllm-project/vllm#29326 (v0.12.0)", {(0, 12)}),
        ("vllm/x.py at each release tag", set()),
    ],
)
def test_a_source_is_read_at_the_releases_its_tags_name(source, series):
    assert contracts.series_read(source) == series


def test_a_fact_read_at_an_older_release_only_predicts_a_newer_one():
    source = contracts.FactSource(
        "vllm/x.py at v0.28.0 and v0.32.0", contracts.series_read("vllm/x.py at v0.28.0 and v0.32.0")
    )
    assert not source.predicts(Version("0.30.1"))  # between two reads
    assert not source.predicts(Version("0.32.4"))
    assert source.predicts(Version("0.33.0"))
    probe = contracts.FactSource("plugin: the probe's own request")
    assert not probe.predicts(Version("0.33.0")), "the plugin's own probes are not vLLM's to predict"


def test_a_release_with_predicted_facts_is_judged_saying_how_many(catalogue):
    def fact(source: str) -> tuple[list, list]:
        return [(SpecifierSet(">=0.28"), True)], [contracts.FactSource(source, contracts.series_read(source))]

    read, predicted, probe = fact("vllm/a.py at v0.33.0"), fact("vllm/b.py at v0.32.0"), fact("plugin: a probe")
    two = dataclasses.replace(
        catalogue,
        facts={"read": read[0], "predicted": predicted[0], "probe": probe[0]},
        sources={"read": read[1], "predicted": predicted[1], "probe": probe[1]},
    )
    assert two.predicted_facts(Version("0.33.0")) == (["predicted"], 2)
    assert two.judgement("0.33.0", Version("0.33.0")) == (
        "0.33.0: within the catalogue (vLLM 0.28 to 0.33); 1 of its 2 facts are predicted from older releases' "
        "source, not read from 0.33's (the report lists them)"
    )
    assert two.judgement("0.32.0", Version("0.32.0")) == "0.32.0: within the catalogue (vLLM 0.28 to 0.33)"
    newer = two.judgement("0.34.0", Version("0.34.0"))
    assert "newer than the catalogue" in newer and "predicted" not in newer


def test_every_covered_release_is_judged_by_facts_read_from_its_source_or_newer(catalogue):
    for minor in (28, 32, 33):  # 0.29 to 0.31 are judged by a fact or two read at the release before
        assert catalogue.predicted_facts(Version(f"0.{minor}.0"))[0] == [], minor


def test_every_departure_is_named_by_a_contract_and_every_named_one_marks_one(catalogue):
    marking = {name for name, sources in catalogue.sources.items() if any(s.departs_from for s in sources)}
    named = {contract.departs_on for contract in catalogue.contracts.values() if contract.departs_on}
    assert named == marking, "a contract's departs_on must name a fact whose ranges mark a departure, and back"


def test_the_orphan_call_output_is_a_known_departure_of_every_covered_release(catalogue):
    for minor in range(28, 34):
        departure = catalogue.departure("responses_unknown_call_output", Version(f"0.{minor}.0"))
        assert departure is not None
        assert departure.release == f"vLLM 0.{minor}.0"
        assert "No tool call found for function call output" in departure.needs
    assert catalogue.departure("responses_store_default", Version("0.32.0")) is None


DEPARTING = """
    import pytest
    from packaging.version import Version
    from pytest_vllm_conformance import contract, known_departure
    from pytest_vllm_conformance.catalogue import contracts

    @contract("agent_loops.responses_unknown_call_output_refused")
    def test_orphan(vllm_evidence):
        departure = contracts.load().departure("responses_unknown_call_output", Version("0.32.0"))
        known_departure(departure, "a function_call_output naming no call was accepted")

    @contract("discovery.version_parses")
    def test_version(vllm_evidence):
        vllm_evidence.judged(1, "stand-in checks")
"""


def test_a_known_departure_is_its_own_outcome_everywhere_and_does_not_fail_the_run(pytester, clean_env):
    pytester.makepyfile(test_departing=DEPARTING)
    report_path = pytester.path / "out" / "report.yaml"
    result = pytester.runpytest("-p", "no:cacheprovider", f"--vllm-report={report_path}", "--junitxml=junit.xml")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*agent_loops*known departures*1 of 1 checked: 1 known departure*",
            "KNOWN DEPARTURE test_departing.py::test_orphan: a function_call_output naming no call was accepted: "
            "a known departure of vLLM 0.32.0: OpenAI's Responses API refuses it: 400 invalid_request_error*"
            "(fact responses_unknown_call_output: vllm/entrypoints/*",
            "*1 passed*1 known departure*",
        ]
    )
    report = read_report(report_path)
    assert report["result"] == "known departures"
    feature = report["features"]["agent_loops"]
    assert (feature["result"], feature["counts"]["known_departure"]) == ("known departures", 1)
    assert feature["known_departure"][0]["reason"].startswith("a function_call_output naming no call was accepted")
    markdown = report_path.with_suffix(".md").read_text()
    assert "**Known departures**" in markdown
    verdicts = {run.contract: run.verdict for run in contract_runs(pytester.path / "junit.xml")}
    assert verdicts["agent_loops.responses_unknown_call_output_refused"] == "known departure"


def test_a_run_of_known_departures_alone_judged_something(pytester, clean_env):
    pytester.makepyfile(test_departing=DEPARTING)
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "orphan")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*nothing was judged*")
