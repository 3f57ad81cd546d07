"""Shards' reports merged into one run's report, and the shards a merge refuses.

The reports are real: the stand-in contract tests (tests/unit/reporting_stand_ins.py)
run by pytester, once whole and once split with -k into two shards.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import yaml

from pytest_vllm_conformance.plugin import cli
from pytest_vllm_conformance.reporting import merge
from tests.support.merged_reports import comparable
from tests.unit.reporting_stand_ins import STAND_INS, read_report

SHARDS = {"one": "accepts_key or health", "two": "not (accepts_key or health)"}


@pytest.fixture
def runs(pytester, clean_env):
    """The whole run's report and JUnit file, and each shard's."""
    pytester.makepyfile(test_stand_ins=STAND_INS)
    paths = {}
    for name, keyword in {"whole": None, **SHARDS}.items():
        report, junit = pytester.path / f"{name}.yaml", pytester.path / f"{name}.xml"
        selection = ("-k", keyword) if keyword else ()
        pytester.runpytest("-p", "no:cacheprovider", f"--vllm-report={report}", f"--junitxml={junit}", *selection)
        paths[name] = (report, junit)
    return paths


def test_two_shards_merged_are_the_whole_run(runs, pytester, capsys):
    out, junit_out = pytester.path / "merged.yaml", pytester.path / "merged.xml"
    shards = [runs[name][0] for name in SHARDS]
    junits = [arg for name in SHARDS for arg in ("--junit", str(runs[name][1]))]
    status = cli.main(["merge", *map(str, shards), "-o", str(out), *junits, "--junit-out", str(junit_out)])
    whole, merged = read_report(runs["whole"][0]), read_report(out)
    assert status == whole["exit_status"] == 1
    assert comparable(merged) == comparable(whole)
    assert merged["features"]["validation_bounds"]["checked"] == "1 of 2 checked"
    assert [shard["file"] for shard in merged["shards"]] == ["one.yaml", "two.yaml"]
    assert out.with_suffix(".md").read_text().startswith("# vLLM conformance report: failure")
    assert _junit_cases(junit_out) == _junit_cases(runs["whole"][1])
    assert "merged 2 report(s): failure" in capsys.readouterr().out


def test_a_shard_given_twice_is_refused(runs):
    shard = merge.load(runs["one"][0])
    with pytest.raises(merge.MergeRefused, match="one.yaml: the same shard as .*one.yaml; give each shard once"):
        merge.merge([shard, shard, merge.load(runs["two"][0])])


def test_a_test_in_two_shards_ending_alike_counts_once(runs):
    merged = merge.merge([merge.load(runs["whole"][0]), merge.load(runs["two"][0])])
    assert comparable(merged) == comparable(read_report(runs["whole"][0]))


def _rewritten(path, edit):
    report = yaml.safe_load(path.read_text())
    edit(report)
    path.write_text(yaml.safe_dump(report, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("edit", "refusal"),
    [
        (lambda r: r["plugin"].update(version="0.0.1"), "plugin version '0.0.1' differs"),
        (lambda r: r["target"].update(profile="other"), "serving profile 'other' differs"),
        (lambda r: r.pop("tests"), "has no tests list"),
        (lambda r: r.update(kind="Something"), "not a VllmConformanceReport"),
    ],
)
def test_shards_of_another_plugin_or_profile_are_refused_naming_the_file(runs, capsys, edit, refusal):
    edited = _rewritten(runs["two"][0], edit)
    status = cli.main(["merge", str(runs["one"][0]), str(edited), "-o", str(edited.with_name("out.yaml"))])
    error = capsys.readouterr().err
    assert status == 2
    assert f"refused: {edited}: " in error and refusal in error
    assert not edited.with_name("out.yaml").exists()


def test_the_same_test_ending_two_ways_is_refused_naming_both_files(runs, capsys):
    def pass_the_failure(report):
        report["tests"] = [dict(t, outcome="passed") if t["outcome"] == "failed" else t for t in report["tests"]]
        report["counts"]["passed"] += report["counts"]["failed"]  # edited whole, so that its tests add up
        report["counts"]["failed"] = 0

    # The whole run holds every test of shard one; in it the failed test now passed.
    edited = _rewritten(runs["whole"][0], pass_the_failure)
    assert cli.main(["merge", str(runs["one"][0]), str(edited), "-o", str(edited.with_name("out.yaml"))]) == 2
    error = capsys.readouterr().err
    assert f"{edited}: test_stand_ins.py::test_accepts_key[POST /v1/completions] passed" in error
    assert f"but {runs['one'][0]} has it failed" in error


def test_a_junit_case_ending_two_ways_is_refused(runs, pytester, capsys):
    whole_junit = runs["whole"][1]
    tree = ET.parse(whole_junit)
    for case in tree.getroot().iter("testcase"):
        for failure in case.findall("failure"):
            case.remove(failure)
    tree.write(whole_junit)
    args = [str(runs["one"][0]), "-o", str(pytester.path / "o.yaml"), "--junit-out", str(pytester.path / "o.xml")]
    assert cli.main(["merge", *args, "--junit", str(runs["one"][1]), "--junit", str(whole_junit)]) == 2
    assert f"{whole_junit}: " in capsys.readouterr().err


def test_shards_of_different_targets_keep_each_test_apart(runs):
    one, two = merge.load(runs["whole"][0]), merge.load(runs["whole"][0])
    two.report["target"]["url"] = "http://replica-b:8000"
    one.report["target"]["url"] = "http://replica-a:8000"
    merged = merge.merge([one, two])
    whole = read_report(runs["whole"][0])
    # Each replica's tests, and the merge's own verdict that both were reached.
    assert merged["counts"] == {key: 2 * count + (key == "passed") for key, count in whole["counts"].items()}
    assert [target["url"] for target in merged["targets"]] == ["http://replica-a:8000", "http://replica-b:8000"]
    assert merged["target"]["url"] is None
    failed = [t["test"] for t in merged["features"]["auth"]["failed"]]
    test = "test_stand_ins.py::test_accepts_key[POST /v1/completions]"
    assert failed == [f"http://replica-{replica}:8000 {test}" for replica in "ab"]


def _junit_cases(path) -> dict[tuple[str, str], str]:
    root = ET.parse(path).getroot()
    verdicts = ("failure", "error", "skipped")
    return {
        (case.get("classname", ""), case.get("name", "")): next(
            (tag for tag in verdicts if case.find(tag) is not None), "passed"
        )
        for case in root.iter("testcase")
    }


def test_shards_run_with_a_profile_merge_to_the_whole_run_s_report(pytester, clean_env):
    """The profile's content hash (target.profile_sha256) travels into the merged report as into the one run's."""
    from pytest_vllm_conformance.reporting.merge import main as merge_main

    pytester.makepyfile(test_stand_ins=STAND_INS)
    profile = pytester.path / "profile.yaml"
    profile.write_text("profile: 1\nname: shards\n")
    paths = {}
    for name, keyword in {"whole": None, **SHARDS}.items():
        paths[name] = pytester.path / f"{name}.yaml"
        selection = ("-k", keyword) if keyword else ()
        pytester.runpytest(
            "-p", "no:cacheprovider", f"--vllm-report={paths[name]}", f"--vllm-profile={profile}", *selection
        )
    out = pytester.path / "merged.yaml"
    merge_main([str(paths["one"]), str(paths["two"]), "-o", str(out)])
    whole, merged = read_report(paths["whole"]), read_report(out)
    assert len(whole["target"]["profile_sha256"]) == 64
    assert comparable(merged) == comparable(whole)


def test_a_shard_that_claimed_nothing_beside_one_that_passed_merges_into_a_run_that_passes(pytester, clean_env):
    """The shard of scale_out alone claims nothing (exit 1, as one run that claims nothing); merged with a shard
    that passed, the run judged something and passed: the merged exit status follows the merged verdict."""
    pytester.makepyfile(test_stand_ins=STAND_INS)
    reports = []
    for name, keyword in (("passed", "health or version"), ("unclaimed", "served")):
        report = pytester.path / f"{name}.yaml"
        pytester.runpytest("-p", "no:cacheprovider", f"--vllm-report={report}", "-k", keyword)
        reports.append(report)
    assert [read_report(report)["exit_status"] for report in reports] == [0, 1]
    out = pytester.path / "merged.yaml"
    assert cli.main(["merge", *map(str, reports), "-o", str(out)]) == 0
    merged = read_report(out)
    assert (merged["result"], merged["exit_status"]) == ("success", 0)
    # Merged with a shard whose claimed check was only skipped, it still judged something; alone, nothing.
    assert cli.main(["merge", str(reports[1]), "-o", str(pytester.path / "alone.yaml")]) == 1
