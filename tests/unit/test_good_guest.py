"""A good guest: the plugin loads through ``pytest11`` into every pytest run of its venv, and a run that sets none
of its options and runs none of its contract tests ends exactly as it would without it installed.

Each run here is made twice, with the plugin and with ``-p no:vllm_conformance``, and the two must agree: the
same exit status, the same terminal output (but the plugin's name in pytest's "plugins:" line and the
durations), the same JUnit file (but its times).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from pytest_vllm_conformance.plugin.option_table import OPTIONS

WITHOUT_US = ("-p", "no:vllm_conformance")
# The project's own ini settles pytest-asyncio's loop scope, so that its warning (once per process) is no matter.
GUEST_INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"

PLAIN = "def test_plain():\n    assert 1 + 1 == 2\n"
MODULE_SKIPPED = "import pytest\npytest.importorskip('no_such_module_of_a_guest')\n\ndef test_never():\n    pass\n"
BROKEN_IMPORT = "import no_such_module_of_a_guest\n\ndef test_never():\n    pass\n"
SKIPPING = "import pytest\n\n@pytest.mark.skip(reason='not today')\ndef test_skipped():\n    pass\n"
# What the plugin would mask in a run of its own: a guest's failure says it as the guest wrote it.
HEADER_FAILURE = (
    "import logging\n\n"
    "def test_header():\n"
    "    logging.getLogger('guest').warning('sent Authorization: Bearer guest-token-123')\n"
    "    assert 'Authorization: Bearer guest-token-123' == ''\n"
)


@pytest.fixture
def guest_env(monkeypatch):
    """No environment variable of the plugin's: the guest never heard of it."""
    for option in OPTIONS:
        if option.env:
            monkeypatch.delenv(option.env, raising=False)
    return monkeypatch


def normalized(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        line = re.sub(r"vllm-conformance-[^,\s]+, ", "", line) if line.startswith("plugins:") else line
        line = re.sub(r" in \d+\.\d+s", " in Ns", line)
        line = re.sub(r"\(\d+:\d\d:\d\d\)", "", line)
        line = re.sub(r"^=+ (.*?) =+$", r"== \1 ==", line)  # the padding follows the duration's width
        lines.append(line.rstrip())
    return lines


def _letters_sorted(line: str) -> str:
    """A progress line (``.s    [100%]``) with its outcome letters in one order."""
    found = re.match(r"^([.sFExX]+)(\s+\[\s*\d+%\])$", line)
    return "".join(sorted(found.group(1))) + found.group(2) if found else line


def both_ways(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, pytest.RunResult]:
    with_us = pytester.runpytest(*args)
    without_us = pytester.runpytest(*args, *WITHOUT_US)
    assert "vllm-conformance" in with_us.stdout.str() and "vllm-conformance" not in without_us.stdout.str()
    return with_us, without_us


def assert_untouched(pytester: pytest.Pytester, *args: str, ordered: bool = True) -> pytest.RunResult:
    with_us, without_us = both_ways(pytester, *args)
    assert with_us.ret == without_us.ret, with_us.stdout.str()
    ours, theirs = normalized(with_us.stdout.str()), normalized(without_us.stdout.str())
    if not ordered:  # xdist's workers report in their own order, lines and the progress line's letters alike
        ours, theirs = (sorted(_letters_sorted(line) for line in lines) for lines in (ours, theirs))
    assert ours == theirs
    assert "INTERNALERROR" not in with_us.stdout.str() and "Traceback" not in with_us.stderr.str()
    return with_us


@pytest.mark.parametrize("report_chars", ["-ra", "-rA"])
def test_a_module_skipped_at_collection_is_a_skip_as_pytest_says(pytester, guest_env, report_chars):
    pytester.makeini(GUEST_INI)
    pytester.makepyfile(test_plain=PLAIN, test_optional=MODULE_SKIPPED, test_skipping=SKIPPING)
    result = assert_untouched(pytester, "-p", "no:cacheprovider", report_chars)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED *could not import 'no_such_module_of_a_guest'*"])


def test_a_collection_error_ends_as_pytest_ends_it(pytester, guest_env):
    pytester.makeini(GUEST_INI)
    pytester.makepyfile(test_plain=PLAIN, test_broken=BROKEN_IMPORT, test_optional=MODULE_SKIPPED)
    result = assert_untouched(pytester, "-p", "no:cacheprovider", "-rA")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert_untouched(pytester, "-p", "no:cacheprovider", "-rA", "--continue-on-collection-errors")


def test_a_guest_s_failure_and_log_are_shown_as_written(pytester, guest_env):
    pytester.makeini(GUEST_INI)
    pytester.makepyfile(test_header=HEADER_FAILURE)
    result = assert_untouched(pytester, "-p", "no:cacheprovider", "-ra", "--log-level=WARNING")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "Bearer guest-token-123" in result.stdout.str()


def test_a_guest_s_junit_file_is_pytest_s(pytester, guest_env):
    pytester.makeini(GUEST_INI)
    pytester.makepyfile(test_plain=PLAIN, test_optional=MODULE_SKIPPED, test_header=HEADER_FAILURE)
    junit = pytester.path / "junit.xml"
    files = []
    for extra in ((), WITHOUT_US):
        pytester.runpytest("-p", "no:cacheprovider", f"--junitxml={junit}", *extra)
        root = ET.parse(junit).getroot()
        for element in root.iter():
            for name in ("time", "timestamp", "hostname"):
                element.attrib.pop(name, None)
        files.append(ET.tostring(root, encoding="unicode"))
    assert files[0] == files[1]
    assert "vllm_" not in files[0]


def test_under_xdist_a_guest_s_run_is_untouched(pytester, guest_env):
    pytester.makeini(GUEST_INI)
    pytester.makepyfile(test_plain=PLAIN, test_optional=MODULE_SKIPPED, test_skipping=SKIPPING)
    result = assert_untouched(pytester, "-p", "no:cacheprovider", "-ra", "-n", "2", ordered=False)
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.parametrize(
    "disabled",
    [
        ("-p", "no:junitxml", "-p", "no:xdist"),
        ("-p", "no:logging", "-p", "no:warnings", "-p", "no:asyncio"),
        ("-p", "no:cacheprovider", "-p", "no:stepwise", "-p", "no:junitxml", "-p", "no:logging"),
    ],
    ids=lambda args: "+".join(arg for arg in args if arg != "-p"),
)
def test_with_pytest_s_own_plugins_off_a_guest_s_run_is_untouched(pytester, guest_env, disabled):
    pytester.makeini(GUEST_INI)
    pytester.makepyfile(test_plain=PLAIN, test_optional=MODULE_SKIPPED, test_header=HEADER_FAILURE)
    result = assert_untouched(pytester, *disabled, "-rA")
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_guest_s_loop_scope_is_its_own(pytester, guest_env):
    """pytest-asyncio warns on a run whose ini leaves its loop scope unset: the plugin settles it for its own runs
    only, so a guest's run keeps the warning (and the loop scope) it would have without the plugin."""
    pytester.makepyfile(test_plain=PLAIN)
    with_us = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    without_us = pytester.runpytest_subprocess("-p", "no:cacheprovider", *WITHOUT_US)
    assert with_us.ret == without_us.ret == pytest.ExitCode.OK
    assert normalized(with_us.stdout.str()) == normalized(without_us.stdout.str())
    assert normalized(with_us.stderr.str()) == normalized(without_us.stderr.str())
    ours = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--vllm-timeout=5")
    assert "asyncio_default_fixture_loop_scope=function" in ours.stdout.str()
