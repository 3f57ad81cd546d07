"""What `vllm-conformance merge` is given: every file answered in one line, and the shard set checked whole.

Issue 41: a shard cut short inside ``tests:`` merged silently or with a
KeyError; a non-UTF-8 shard or an unwritable ``-o`` gave a traceback and exit
1. Issue 40: a missing or duplicate shard, an unreachable replica's shard, a
skewed replica and shards of another gate or profile content all merged to
success. The shards are real reports of the stand-in tests run by pytester.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from pytest_vllm_conformance.plugin import cli
from pytest_vllm_conformance.reporting import merge
from tests.unit.reporting_stand_ins import STAND_INS, read_report
from tests.unit.sample_observation import observation

SMALL = (
    "from pytest_vllm_conformance import contract\n"
    "@contract('discovery.max_model_len_published')\n"
    "def test_passes(vllm_evidence):\n    vllm_evidence.judged(1, 'stand-in checks')\n"
    "@contract('discovery.version_parses')\n"
    "def test_fails():\n    assert False, 'the version does not parse'\n"
)
A, B, C = "http://replica-a:8000", "http://replica-b:8000", "http://replica-c:8000"


def refusal(args, capsys) -> str:
    """The merge's one line: exit 2, nothing on stdout, no traceback (an exception would fail the test itself)."""
    assert cli.main(["merge", *map(str, args)]) == 2
    out, err = capsys.readouterr()
    assert not out and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.fixture
def small_shard(pytester, clean_env):
    """A shard of one passed and one failed test."""
    pytester.makepyfile(test_small=SMALL)
    path = pytester.path / "small.yaml"
    pytester.runpytest("-p", "no:cacheprovider", f"--vllm-report={path}")
    return path


def test_a_shard_cut_anywhere_in_its_tests_is_refused_or_keeps_every_test(small_shard, tmp_path):
    text = small_shard.read_text()
    intact = [(t["test"], t["outcome"]) for t in read_report(small_shard)["tests"]]
    cut = tmp_path / "cut.yaml"
    refused = kept = 0
    start = text.index("\ntests:")
    # Every line's ends (where a cut drops whole tests) and every fifth character between (inside a value).
    lines = {i + shift for i, char in enumerate(text) if char == "\n" and i >= start for shift in (0, 1)}
    for end in sorted(lines.union(range(start, len(text), 5)) - {len(text)}):
        cut.write_text(text[:end])
        try:  # what the command runs; anything but a refusal would fail this test with its traceback
            merged = merge.merge([merge.load(cut)])
        except merge.MergeRefused as exc:
            assert len(str(exc).splitlines()) == 1, (end, exc)
            refused += 1
            continue
        # A cut inside the last reason's text leaves a valid report: every test is still there.
        assert [(t["test"], t["outcome"]) for t in merged["tests"]] == intact, end
        kept += 1
    assert refused > 50 and kept < 20


def test_a_shard_whose_counts_do_not_add_up_is_refused(small_shard, capsys):
    report = read_report(small_shard)
    report["tests"] = report["tests"][:1]  # cut after the first test, the counts left as they were
    small_shard.write_text(yaml.safe_dump(report))
    assert refusal([small_shard, "-o", small_shard.with_name("o.yaml")], capsys) == (
        f"vllm-conformance merge: refused: {small_shard}: its counts say 1 passed, its tests list 0: the file was "
        "cut short or edited; rerun the shard (or use the file as it was written)"
    )


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("kind: x\n".encode("utf-16"), "UTF-16 text (it starts with a UTF-16 BOM); save it as UTF-8"),
        (b"kind: caf\xe9\n", "not UTF-8 text (byte 0xe9 at offset 9); save it as UTF-8"),
        (b"a: &a [1]\nb: *a\n", "not valid YAML: line 2, column 4: an alias (*a): aliases are not read here"),
    ],
)
def test_a_shard_that_is_not_utf8_yaml_is_one_line(tmp_path, capsys, content, said):
    shard = tmp_path / "shard.yaml"
    shard.write_bytes(content)
    assert refusal([shard, "-o", tmp_path / "o.yaml"], capsys).startswith(
        f"vllm-conformance merge: refused: {shard}: {said}"
    )


def test_an_unwritable_output_is_one_line(small_shard, capsys):
    blocked = small_shard.with_name("a-file")
    blocked.write_text("")
    line = refusal([small_shard, "-o", blocked / "merged.yaml"], capsys)
    assert line == f"vllm-conformance merge: refused: -o {blocked / 'merged.yaml'}: {blocked} is not a directory"


@pytest.fixture
def split(pytester, clean_env):
    """The stand-ins split in two shards that declare their set (--vllm-shard=1/2, 2/2)."""
    pytester.makepyfile(test_stand_ins=STAND_INS)
    paths = []
    for index, keyword in ((1, "accepts_key or health"), (2, "not (accepts_key or health)")):
        path = pytester.path / f"shard-{index}.yaml"
        pytester.runpytest("-p", "no:cacheprovider", f"--vllm-report={path}", "-k", keyword, f"--vllm-shard={index}/2")
        paths.append(path)
    return paths


def test_declared_shards_merge_whole_and_a_missing_or_repeated_one_is_refused(split, tmp_path, capsys):
    out = tmp_path / "o.yaml"
    assert cli.main(["merge", *map(str, split), "-o", str(out)]) == 1
    assert [line["shard"] for line in read_report(out)["shards"]] == [
        {"index": 1, "total": 2},
        {"index": 2, "total": 2},
    ]
    capsys.readouterr()
    assert refusal([split[0], "-o", out], capsys) == (
        f"vllm-conformance merge: refused: shard(s) 2 of 2 missing (given: {split[0]}); a shard that did not run "
        "leaves the merged run incomplete"
    )
    again = split[0].with_name("again.yaml")
    again.write_text(split[0].read_text())
    assert refusal([split[0], again, split[1], "-o", out], capsys) == (
        f"vllm-conformance merge: refused: {again}: shard 1 is given twice (also {split[0]}); give each once"
    )


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda r: r.update(gate="strict"), "gate 'strict' differs from 'report'"),
        (lambda r: r["target"].update(profile_sha256="0" * 64), "serving profile's content '" + "0" * 64),
        (lambda r: r["shard"].update(total=3), "shard set total 3 differs from 2"),
        (lambda r: r.pop("shard"), "declares no shard set, but"),
        (lambda r: r["shard"].update(total=10**9), "its shard section is neither an index and total nor a replica"),
    ],
)
def test_shards_of_another_gate_profile_or_set_are_refused(split, capsys, edit, said):
    report = read_report(split[1])
    edit(report)
    split[1].write_text(yaml.safe_dump(report, sort_keys=False))
    assert said in refusal([*split, "-o", split[0].with_name("o.yaml")], capsys)


def replica_shards(report_path, tmp_path, replicas=(A, B), **observed):
    """Shards of one fleet, one per replica, as --vllm-shard-replicas writes them."""
    base = read_report(report_path)
    paths = []
    for url in replicas:
        report = copy.deepcopy(base)
        report["target"]["url"] = url
        report["target"]["observed"] = observed.get(url, observation(url=url))
        report["shard"] = {"replica": url, "replicas": list(replicas)}
        path = tmp_path / f"{url.split('//')[1].split(':')[0]}.yaml"
        path.write_text(yaml.safe_dump(report, sort_keys=False))
        paths.append(path)
    return paths


def fleet_verdicts(path):
    tests = read_report(path)["tests"]
    return {t["test"]: (t["outcome"], t.get("reason", "")) for t in tests if t["test"].startswith("merge::")}


def test_replica_shards_that_agree_merge_with_the_fleet_s_verdicts(small_shard, tmp_path):
    out = tmp_path / "o.yaml"
    cli.main(["merge", *map(str, replica_shards(small_shard, tmp_path)), "-o", str(out)])
    verdicts = fleet_verdicts(out)
    assert verdicts == {
        "merge::test_replicas_reached": ("passed", ""),
        f"merge::test_replicas_agree[{A}]": ("passed", ""),
        f"merge::test_replicas_agree[{B}]": ("passed", ""),
    }


def test_a_skewed_replica_s_shard_fails_the_merge_named_even_when_it_is_the_first(small_shard, tmp_path):
    """As the in-process fleet decides: the majority, not the first replica, is the side the others are held to."""
    skewed = observation(url=A, vllm_version="0.32.0")
    shards = replica_shards(small_shard, tmp_path, (A, B, C), **{A: skewed})
    out = tmp_path / "o.yaml"
    assert cli.main(["merge", *map(str, shards), "-o", str(out)]) == 1
    verdicts = fleet_verdicts(out)
    outcome, reason = verdicts[f"merge::test_replicas_agree[{A}]"]
    assert outcome == "failed" and reason.startswith(f"replica {A} is the odd one out against the majority {B}, {C}")
    assert "0.32.0" in reason and "0.31.0" in reason
    for agreeing in (B, C):
        assert verdicts[f"merge::test_replicas_agree[{agreeing}]"] == ("passed", "")


def test_two_replica_shards_that_disagree_with_nothing_to_decide_by_both_fail(small_shard, tmp_path):
    skewed = observation(url=B, vllm_version="0.32.0")
    out = tmp_path / "o.yaml"
    cli.main(["merge", *map(str, replica_shards(small_shard, tmp_path, **{B: skewed})), "-o", str(out)])
    verdicts = fleet_verdicts(out)
    for url in (A, B):
        outcome, reason = verdicts[f"merge::test_replicas_agree[{url}]"]
        assert outcome == "failed" and "the fleet splits 1" in reason, (url, reason)


def test_an_unreachable_replica_s_shard_fails_the_merge_named(pytester, clean_env, small_shard, tmp_path):
    """The unreachable replica's run writes its report (the usage error its verdict); the merge fails on it."""
    unreachable = tmp_path / "b.yaml"
    pytester.makepyfile("def test_needs_server(vllm_facts):\n    pass\n")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--vllm-url=http://127.0.0.1:9", f"--vllm-report={unreachable}",
        f"--vllm-shard-replicas={A},http://127.0.0.1:9",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert read_report(unreachable)["shard"] == {"replica": "http://127.0.0.1:9", "replicas": [A, "http://127.0.0.1:9"]}
    reached = replica_shards(small_shard, tmp_path)[0]
    report = read_report(reached)
    report["shard"]["replicas"] = [A, "http://127.0.0.1:9"]
    reached.write_text(yaml.safe_dump(report, sort_keys=False))
    out = tmp_path / "o.yaml"
    assert cli.main(["merge", str(reached), str(unreachable), "-o", str(out)]) == 1
    merged = read_report(out)
    outcome, reason = fleet_verdicts(out)["merge::test_replicas_reached"]
    assert merged["result"] == "failure" and outcome == "failed"
    assert reason.startswith(
        "replica(s) not reached:\nreplica http://127.0.0.1:9: cannot reach vLLM at http://127.0.0.1:9"
    )
    assert merged["shards"][1]["error"].startswith("cannot reach vLLM at http://127.0.0.1:9")


def test_a_shard_its_options_stopped_keeps_its_place_and_the_merge_names_it(split, pytester, capsys):
    stopped = split[1]
    result = pytester.runpytest(
        "-p", "no:cacheprovider", f"--vllm-report={stopped}", "--vllm-shard=2/2", "--vllm-timeout=nan"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert read_report(stopped)["shard"] == {"index": 2, "total": 2}
    capsys.readouterr()  # the run's own line
    assert refusal([split[0], stopped, "-o", stopped.with_name("o.yaml")], capsys) == (
        f"vllm-conformance merge: refused: {stopped}: the shard stopped before any test: --vllm-timeout (from "
        "--vllm-timeout): 'nan' is not valid: must be a finite number"
    )


@pytest.mark.parametrize("declared", ["--vllm-shard=1/2", f"--vllm-shard-replicas={A},{B}"])
def test_a_shard_without_a_report_is_a_usage_error(pytester, clean_env, declared):
    pytester.makepyfile(test_small=SMALL)
    result = pytester.runpytest("-p", "no:cacheprovider", declared, f"--vllm-url={A}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    flag = declared.split("=")[0]
    result.stderr.fnmatch_lines([f"ERROR: {flag} needs --vllm-report=PATH: a shard's report is what *"])


def test_shards_of_different_runs_are_refused(pytester, clean_env, capsys):
    """Shard 1/2 of one run and shard 2/2 of another run minutes later: their run ids differ."""
    pytester.makepyfile(test_small=SMALL)
    clean_env.setenv("GITHUB_RUN_ID", "7001")
    clean_env.setenv("GITHUB_RUN_ATTEMPT", "1")
    paths = {}
    for index, run in ((1, None), (2, None), (3, "nightly-2")):
        path = pytester.path / f"shard-{index}.yaml"
        keyword = "test_passes" if index == 1 else "test_fails"
        run_option = [f"--vllm-shard-run={run}"] if run else []
        pytester.runpytest(
            "-p", "no:cacheprovider", f"--vllm-report={path}", "-k", keyword, f"--vllm-shard={min(index, 2)}/2",
            *run_option,
        )  # fmt: skip
        paths[index] = path
    assert read_report(paths[1])["shard"] == {"index": 1, "total": 2, "run": "GITHUB_RUN_ID=7001-1"}
    assert cli.main(["merge", str(paths[1]), str(paths[2]), "-o", str(pytester.path / "m.yaml")]) == 1
    capsys.readouterr()
    assert refusal([paths[1], paths[3], "-o", pytester.path / "m.yaml"], capsys) == (
        f"vllm-conformance merge: refused: {paths[3]}: run 'nightly-2' differs from 'GITHUB_RUN_ID=7001-1' in "
        f"{paths[1]}; shards of one run share both"
    )
