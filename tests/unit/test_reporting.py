"""Reports for pipelines, without a server: the verdict per feature, the report
files, the JUnit file under each family, the terminal summary, pytest-xdist.

Contract tests here are stand-ins: they carry a real catalogue contract but
need no server (no target fixture), and pass, fail or skip on purpose.
"""

from __future__ import annotations

from datetime import UTC

import pytest

from pytest_vllm_conformance.catalogue import contracts
from tests.unit.reporting_stand_ins import SCALE_OUT_OFF, STAND_INS, read_report


def test_report_judges_every_catalogue_feature(pytester, clean_env):
    pytester.makepyfile(test_stand_ins=STAND_INS)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--vllm-report={pytester.path / 'out' / 'report.yaml'}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    report = read_report(pytester.path / "out" / "report.yaml")
    assert report["kind"] == "VllmConformanceReport"
    assert report["result"] == "failure"
    assert report["exit_status"] == 1
    assert list(report["features"]) == list(contracts.load().features)
    features = report["features"]
    assert (features["discovery"]["claimed"], features["discovery"]["result"]) == (True, "success")
    assert features["discovery"]["counts"] == {
        "passed": 2,
        "failed": 0,
        "known_departure": 0,
        "undecided": 0,
        "skipped": 0,
        "not_claimed": 0,
    }
    assert features["auth"]["result"] == "failure"
    assert features["auth"]["failed"] == [
        {
            "contract": "auth.guarded_route_accepts_key",
            "test": "test_stand_ins.py::test_accepts_key[POST /v1/completions]",
            "reason": "POST /v1/completions refused the right key: 401",
        }
    ]
    assert features["validation_bounds"]["result"] == "partial"
    assert features["validation_bounds"]["skipped"] == [
        {
            "contract": "validation_bounds.answered_fast",
            "test": "test_stand_ins.py::test_fast",
            "reason": "no malformed request could be built for this server",
        }
    ]
    assert (features["scale_out"]["claimed"], features["scale_out"]["result"]) == (False, "not claimed")
    assert features["scale_out"]["not_claimed"] == [
        {"contract": "scale_out.enabled_routes_served", "tests": 2, "reason": SCALE_OUT_OFF}
    ]
    assert features["discovery"]["checked"] == "2 of 2 checked"
    assert features["validation_bounds"]["checked"] == "1 of 2 checked"
    assert features["scale_out"]["checked"] is None
    assert features["embedding_limits"]["result"] == "not run"
    assert report["counts"] == {
        "passed": 5,
        "failed": 1,
        "known_departure": 0,
        "undecided": 0,
        "skipped": 1,
        "not_claimed": 2,
    }
    assert report["plugin"]["version"] and report["date"]
    assert set(report["target"]) == {"url", "vllm_version", "release", "model", "server", "profile", "profile_file"}
    assert report["gate"] == "report"


def test_markdown_twin_has_the_feature_table_and_each_failure(pytester, clean_env):
    pytester.makepyfile(test_stand_ins=STAND_INS)
    pytester.runpytest("-p", "no:cacheprovider", "--vllm-report=report.yaml")
    markdown = (pytester.path / "report.md").read_text()
    assert markdown.startswith("# vLLM conformance report: failure\n")
    assert "| discovery | yes | success | 2 of 2 checked | 2 | 0 | 0 | 0 | 0 |" in markdown
    assert "| validation_bounds | yes | partial | 1 of 2 checked | 1 | 0 | 0 | 0 | 1 | 0 |" in markdown
    assert "| scale_out | no | not claimed | — | 0 | 0 | 0 | 0 | 0 | 2 |" in markdown
    assert (
        "- `auth.guarded_route_accepts_key` `test_stand_ins.py::test_accepts_key[POST /v1/completions]`: "
        "POST /v1/completions refused the right key: 401"
    ) in markdown
    assert f"- `scale_out.enabled_routes_served` (2 tests): {SCALE_OUT_OFF}" in markdown


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        ({"pass": 3}, "success"),
        ({"pass": 3, "skip": 1}, "partial"),
        ({"pass": 1, "skip": 1, "fail": 1}, "failure"),
        ({"not_claimed": 2}, "not claimed"),
        ({"not_claimed": 2, "pass": 1}, "success"),
        ({"not_claimed": 1, "skip": 1}, "partial"),
    ],
)
def test_claimed_feature_with_a_skipped_contract_is_partial_never_success(pytester, clean_env, outcomes, expected):
    # With auth declared none, the guarded-route contracts are not claimed and open_server_declared still is.
    bodies = {
        "pass": "vllm_evidence.judged(1, 'stand-in checks')",
        "fail": "assert False, 'broken'",
        "skip": "pytest.skip('no key')",
        "not_claimed": "raise AssertionError('never runs')",
    }
    contract_of = {"not_claimed": "auth.guarded_route_accepts_key"}
    lines = ["import pytest", "from pytest_vllm_conformance import contract"]
    for kind, count in outcomes.items():
        for index in range(count):
            contract_id = contract_of.get(kind, "auth.open_server_declared")
            lines += [f'@contract("{contract_id}")', f"def test_{kind}_{index}(vllm_evidence):", f"    {bodies[kind]}"]
    pytester.makepyfile("\n".join(lines))
    pytester.makefile(".yaml", profile="profile: 1\nname: open\nendpoint: {auth: none}\n")
    pytester.runpytest("-p", "no:cacheprovider", "--vllm-report=r.yaml", "--vllm-profile=profile.yaml")
    assert read_report(pytester.path / "r.yaml")["features"]["auth"]["result"] == expected


def test_a_test_cannot_declare_itself_not_claimed(pytester, clean_env):
    """Only the plugin decides "not claimed"; a skip a test raises, whatever its words, leaves the feature partial."""
    pytester.makepyfile(
        """
        import pytest
        from pytest_vllm_conformance import contract

        @contract("auth.open_server_declared")
        def test_sneaky():
            pytest.skip("not claimed: the server looked odd")
        """
    )
    pytester.runpytest("-p", "no:cacheprovider", "--vllm-report=r.yaml")
    auth = read_report(pytester.path / "r.yaml")["features"]["auth"]
    assert (auth["result"], auth["counts"]["skipped"], auth["counts"]["not_claimed"]) == ("partial", 1, 0)


def test_strict_gate_fails_a_partial_run(pytester, clean_env):
    pytester.makepyfile(
        """
        import pytest
        from pytest_vllm_conformance import contract

        @contract("auth.open_server_declared")
        def test_skipped():
            pytest.skip("no key given")

        @contract("discovery.version_parses")
        def test_ok(vllm_evidence):
            vllm_evidence.judged(1, "stand-in checks")
        """
    )
    assert pytester.runpytest("-p", "no:cacheprovider").ret == pytest.ExitCode.OK
    result = pytester.runpytest("-p", "no:cacheprovider", "--vllm-gate=strict", "--vllm-report=r.yaml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["--vllm-gate=strict: partial feature(s) fail the run: auth (0 of 1 checked)"])
    report = read_report(pytester.path / "r.yaml")
    assert (report["gate"], report["exit_status"]) == ("strict", 1)


@pytest.mark.parametrize("gate", ["report", "strict"])
def test_a_run_that_claimed_nothing_does_not_pass_under_any_gate(pytester, clean_env, gate):
    pytester.makepyfile(
        """
        import pytest
        from pytest_vllm_conformance import contract

        @contract("scale_out.enabled_routes_served")
        def test_served():
            raise AssertionError("a contract that is not claimed never runs")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", f"--vllm-gate={gate}", "--vllm-report=r.yaml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*nothing was claimed: no contract of this run applies*the run does not pass"])
    report = read_report(pytester.path / "r.yaml")
    assert (report["result"], report["exit_status"]) == ("not claimed", 1)


@pytest.mark.parametrize("gate", ["report", "strict"])
def test_a_run_whose_claimed_checks_reached_no_verdict_does_not_pass(pytester, clean_env, gate):
    """Claimed, but every check undecided or skipped: "partial" with exit 0 would pass a gate on no evidence."""
    pytester.makepyfile(
        """
        import pytest
        from pytest_vllm_conformance import contract, undecided

        @contract("discovery.version_parses")
        def test_undecided():
            undecided("the tiny model cannot show it")

        @contract("auth.open_server_declared")
        def test_skipped():
            pytest.skip("no key given")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", f"--vllm-gate={gate}", "--vllm-report=r.yaml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["nothing was judged: none of the 2 claimed check(s) of this run reached a verdict*the run does not pass"]
    )
    report = read_report(pytester.path / "r.yaml")
    assert (report["result"], report["exit_status"]) == ("partial", 1)


def test_one_verdict_is_enough_for_a_run_to_pass_beside_undecided_checks(pytester, clean_env):
    pytester.makepyfile(
        """
        from pytest_vllm_conformance import contract, undecided

        @contract("discovery.version_parses")
        def test_undecided():
            undecided("the tiny model cannot show it")

        @contract("discovery.max_model_len_published")
        def test_ok(vllm_evidence):
            vllm_evidence.judged(1, "stand-in checks")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    assert "nothing was judged" not in result.stdout.str()


def test_gate_takes_only_its_two_values(pytester, clean_env):
    result = pytester.runpytest("-p", "no:cacheprovider", "--vllm-gate=lenient")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--vllm-gate (from --vllm-gate): 'lenient' is not valid: choose one of report, strict*"]
    )


def test_errors_in_setup_and_xfail_are_counted(pytester, clean_env):
    pytester.makepyfile(
        """
        import pytest
        from pytest_vllm_conformance import contract

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture exploded")

        @contract("discovery.max_model_len_published")
        def test_setup_error(broken, vllm_evidence):
            vllm_evidence.judged(1, "stand-in checks")

        @contract("discovery.core_routes_served")
        @pytest.mark.xfail(reason="known regression")
        def test_known():
            assert False
        """
    )
    pytester.runpytest("-p", "no:cacheprovider", "--vllm-report=r.yaml")
    discovery = read_report(pytester.path / "r.yaml")["features"]["discovery"]
    assert discovery["failed"][0]["reason"] == "error in setup: RuntimeError: fixture exploded"
    assert discovery["skipped"][0]["reason"] == "expected to fail: known regression"


def test_report_path_comes_from_the_environment_too(pytester, clean_env):
    pytester.makepyfile(test_stand_ins=STAND_INS)
    clean_env.setenv("VLLM_CONFORMANCE_REPORT", str(pytester.path / "from-env.yaml"))
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert (pytester.path / "from-env.yaml").is_file() and (pytester.path / "from-env.md").is_file()
    result.stdout.fnmatch_lines([f"report: {pytester.path / 'from-env.yaml'} and {pytester.path / 'from-env.md'}"])


def test_report_path_naming_the_markdown_file_is_a_usage_error(pytester, clean_env):
    result = pytester.runpytest("-p", "no:cacheprovider", "--vllm-report=report.md")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--vllm-report report.md: name the YAML file*"])


def test_terminal_summary_has_one_line_per_feature(pytester, clean_env):
    pytester.makepyfile(test_stand_ins=STAND_INS)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        [
            "*- vLLM conformance: failure -*",
            "  discovery *success *2 of 2 checked: 2 passed",
            "  scale_out *not claimed *2 not claimed",
            "  auth *failure *3 of 3 checked: 2 passed, 1 failed",
            "  validation_bounds *partial *1 of 2 checked: 1 passed, 1 skipped",
        ]
    )
    assert "report:" not in result.stdout.str()  # none asked for
    # Only the features the run touched: no "not run" line for every feature the selection left out.
    assert "embedding_limits" not in result.stdout.str() and "not run" not in result.stdout.str()


def test_no_summary_when_no_contract_test_ran(pytester, clean_env):
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert "vLLM conformance" not in result.stdout.str()


# ---- pytest-xdist ----------------------------------------------------------------------

# Counts report writes across every process of the run (controller and workers).
COUNTING_CONFTEST = """
    import os

    from pytest_vllm_conformance.reporting import report_files

    _write = report_files.write

    def _counting_write(path, report):
        with open(os.environ["REPORT_WRITES"], "a") as log:
            log.write(f"{os.getpid()} {'worker' if os.environ.get('PYTEST_XDIST_WORKER') else 'controller'}\\n")
        return _write(path, report)

    report_files.write = _counting_write
"""


def test_xdist_gives_the_serial_report_written_once_by_the_controller(pytester, clean_env):
    pytest.importorskip("xdist")
    # When our own tests run under xdist, the inner controller would inherit this and look like a worker.
    clean_env.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(test_stand_ins=STAND_INS)
    pytester.makeconftest(COUNTING_CONFTEST)
    reports = {}
    for mode, extra in (("serial", ()), ("xdist", ("-n", "2"))):
        writes = pytester.path / f"{mode}-writes.log"
        clean_env.setenv("REPORT_WRITES", str(writes))
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", f"--vllm-report={pytester.path / mode}.yaml", "-rA", *extra
        )
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        lines = writes.read_text().splitlines()
        assert len(lines) == 1 and lines[0].endswith(" controller"), lines
        reports[mode] = read_report(pytester.path / f"{mode}.yaml")
        result.stdout.fnmatch_lines(["*- vLLM conformance: failure -*"])
    for report in reports.values():
        del report["date"]
    assert reports["xdist"] == reports["serial"]


# ---- the contract catalogue ----------------------------------------------------------------


def test_list_contracts_names_id_feature_versions_and_statement(pytester, clean_env):
    result = pytester.runpytest("--vllm-list-contracts")
    assert result.ret == 0
    catalogue = contracts.load()
    headings = {f"{name}: {feature.statement}": name for name, feature in catalogue.features.items()}
    listed = {}  # contract line -> the feature heading it is listed under
    feature = None
    for line in result.outlines:
        feature = headings.get(line, feature)
        if line.startswith("  "):
            listed[line] = feature
    for contract in catalogue.contracts.values():
        line = f"  {contract.id}  [vLLM {contract.versions}]  {contract.statement}"
        if contract.conditions:
            line += f"  claimed when {' and '.join(map(str, contract.conditions))}."
        assert listed.get(line) == contract.feature, line
    # Each feature's own condition and the releases that have it are shown under its heading.
    result.stdout.fnmatch_lines(
        [
            "watermark: *",
            "  (claimed when the server serves generation and watermark.required is true)",
            "  (vLLM >=0.30 has it)",
        ]
    )
    result.stdout.fnmatch_lines(
        ["  scale_out.disabled_routes_refused  *  claimed when endpoint.scale_out is disabled."]
    )


def test_report_option_is_in_the_help(pytester, clean_env):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--vllm-report=PATH*"])
    assert "VLLM_CONFORMANCE_REPORT" in result.stdout.str()


def test_report_entries_do_not_depend_on_the_order_tests_ended():
    from datetime import datetime

    from pytest_vllm_conformance.reporting import Redactor, report_files
    from pytest_vllm_conformance.reporting.outcomes import ContractTest, feature_results

    tests = [
        ContractTest(f"t.py::test_{name}", contract, "auth", outcome, reason)
        for name, contract, outcome, reason in (
            ("b", "auth.guarded_route_accepts_key", "failed", "401"),
            ("a", "auth.guarded_route_accepts_key", "failed", "401"),
            ("c", "auth.guarded_route_refuses_wrong_key", "not claimed", "off"),
            ("d", "auth.guarded_route_accepts_key", "not claimed", "off"),
        )
    ]
    run = report_files.RunInfo(started=datetime.now(UTC), plugin_version="0")
    built = [
        report_files.build(run, feature_results({"auth": "..."}, order), Redactor())["features"]["auth"]
        for order in (tests, tests[::-1])
    ]
    assert built[0] == built[1]
    assert [entry["test"] for entry in built[0]["failed"]] == ["t.py::test_a", "t.py::test_b"]
    assert [entry["contract"] for entry in built[0]["not_claimed"]] == [
        "auth.guarded_route_accepts_key",
        "auth.guarded_route_refuses_wrong_key",
    ]


def test_a_feature_whose_every_ingress_check_was_not_exposed_fails_and_one_exposed_check_is_enough():
    from pytest_vllm_conformance.reporting.outcomes import ContractTest, feature_results

    def at_ingress(name, hidden="", outcome="passed"):
        return ContractTest(
            f"t.py::{name}",
            "watermark.opt_out_stripped_at_ingress",
            "watermark",
            outcome,
            "",
            "",
            at_ingress=True,
            hidden=hidden,
        )

    control = ContractTest("t.py::control", "watermark.opt_out_control", "watermark", "passed")
    hidden = [
        at_ingress("chat", "chat (POST /v1/chat/completions)"),
        at_ingress("resp", "responses (POST /v1/responses)"),
    ]
    (result,) = feature_results({"watermark": "..."}, [*hidden, control])
    assert (result.result, result.not_exposed) == ("failure", 2)
    assert result.problem == (
        "the ingress exposes none of the routes this feature checks there: "
        "chat (POST /v1/chat/completions), responses (POST /v1/responses)"
    )
    (result,) = feature_results({"watermark": "..."}, [*hidden, control, at_ingress("completions")])
    assert (result.result, result.problem, result.not_exposed) == ("success", "", 2)


def test_a_report_that_cannot_be_written_fails_the_run(pytester, clean_env):
    # The path could be written when the run started (tests/unit/test_output_paths.py: else a usage error before
    # any test); a test blocks it meanwhile.
    pytester.makepyfile(
        test_passing="from pytest_vllm_conformance import contract\n\n"
        "@contract('discovery.max_model_len_published')\n"
        "def test_ok(vllm_evidence):\n    vllm_evidence.judged(1, 'checks')\n"
        "    open('not-a-dir', 'w').close()\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--vllm-report=not-a-dir/report.yaml")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines(["report NOT written: *not-a-dir/report.yaml: *"])
