"""A selection that names nothing real is refused: a word of -m that is neither a feature nor a registered marker."""

from __future__ import annotations

import pytest

from pytest_vllm_conformance.plugin.selection import marker_words
from tests.unit.reporting_stand_ins import STAND_INS

QUIET = ("-p", "no:cacheprovider")


def test_the_words_of_a_marker_expression():
    assert marker_words("scale_ot or (discovery and not auth)") == ["scale_ot", "discovery", "auth"]
    assert marker_words("mark(name='x', n=1) or not slow") == ["mark", "slow"]


def usage_line(result: pytest.RunResult) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1 and "Traceback" not in result.stderr.str(), result.errlines
    return errors[0]


@pytest.mark.parametrize(
    ("expression", "said"),
    [
        ("scale_ot or discovery", "'scale_ot' is neither a feature nor a registered marker (did you mean scale_out?)"),
        ("nosuchmarker", "'nosuchmarker' is neither a feature nor a registered marker"),
    ],
)
def test_a_word_that_is_no_marker_is_a_usage_error_naming_it(pytester, clean_env, expression, said):
    pytester.makepyfile(test_stand_ins=STAND_INS)
    result = pytester.runpytest(*QUIET, "-m", expression, "--vllm-report=report.yaml")
    line = usage_line(result)
    assert line.startswith(f"ERROR: -m {expression!r}: {said}"), line
    assert "result: usage error" in (pytester.path / "report.yaml").read_text()


def test_features_and_registered_markers_select_as_before(pytester, clean_env):
    pytester.makepyfile(test_stand_ins=STAND_INS)
    result = pytester.runpytest(*QUIET, "-m", "discovery and not auth and not skip")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "deselected" in result.stdout.str()


def test_a_guest_s_selection_is_pytest_s(pytester, monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest(*QUIET, "-m", "nosuchmarker")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["*1 deselected*"])
