"""A run cut short says so: Ctrl-C and SIGTERM (a CI deadline, Kubernetes stopping the pod) end the run as
``interrupted`` in the banner, the report, the JUnit file and the merge, never as the success of the tests that ran.

The runs are subprocesses, as a user's pytest is: the signal is a real one, sent by a test to its own process.
"""

from __future__ import annotations

import signal
import xml.etree.ElementTree as ET

import pytest
import yaml

from pytest_vllm_conformance.plugin import cli

# Two contracts pass; the third test stops the run with a signal, so the fourth never runs.
CUT_SHORT = """
import os, signal
from pytest_vllm_conformance import contract

@contract('discovery.max_model_len_published')
def test_a(vllm_evidence):
    vllm_evidence.judged(1, 'checks')

@contract('discovery.version_parses')
def test_b(vllm_evidence):
    vllm_evidence.judged(1, 'checks')

def test_stop():
    # As a terminal's Ctrl-C finds it: a run started in the background of a shell without job control (nohup
    # cmd &, a CI runner's script) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.kill(os.getpid(), signal.{signal})

@contract('discovery.core_routes_served')
def test_never(vllm_evidence):
    vllm_evidence.judged(1, 'checks')
"""


@pytest.fixture
def cut_short_env(monkeypatch):
    for name in ("VLLM_URL", "VLLM_CONFORMANCE_REPORT", "VLLM_CONFORMANCE_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VLLM_API_KEY", "stand-in-key")
    return monkeypatch


@pytest.mark.parametrize("sent", ["SIGINT", "SIGTERM"])
def test_a_run_cut_short_is_interrupted_everywhere_it_is_reported(pytester, cut_short_env, sent):
    pytester.makepyfile(test_cut=CUT_SHORT.replace("{signal}", sent))
    report = pytester.path / "report.yaml"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--vllm-report={report}", "--junitxml=j.xml")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    output = result.stdout.str()
    assert "-- vLLM conformance: interrupted --" in output.replace("-" * 3, "--")
    by = " by SIGTERM" if sent == "SIGTERM" else ""
    assert f"the run was interrupted{by}: the verdicts above cover only the tests that ran" in output
    written = yaml.safe_load(report.read_text())
    assert (written["result"], written["exit_status"], written["counts"]["passed"]) == ("interrupted", 2, 2)
    assert "**interrupted**" in report.with_suffix(".md").read_text()
    properties = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "j.xml").getroot().iter("property")}
    assert properties["vllm_conformance_result"] == "interrupted"

    # Merged with a shard that ran whole, the set is still interrupted, and the merge says so.
    whole = pytester.path / "whole.yaml"
    pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--vllm-report={whole}", "-k", "test_a")
    assert yaml.safe_load(whole.read_text())["result"] == "success"
    merged = pytester.path / "merged.yaml"
    assert cli.main(["merge", str(whole), str(report), "-o", str(merged)]) == 2
    assert yaml.safe_load(merged.read_text())["result"] == "interrupted"


def test_a_sigterm_handler_of_the_user_s_is_left_alone(pytester, cut_short_env):
    pytester.makeconftest(
        "import signal\n"
        "def pytest_configure(config):\n"
        "    signal.signal(signal.SIGTERM, lambda *_: print('USER HANDLER'))\n"
    )
    pytester.makepyfile(test_cut=CUT_SHORT.replace("{signal}", "SIGTERM"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s")
    assert result.ret == pytest.ExitCode.OK
    assert "USER HANDLER" in result.stdout.str()


def test_sigterm_is_the_user_s_in_a_run_that_is_not_ours(pytester, cut_short_env):
    """A guest's run (no option of ours) keeps SIGTERM's default: the process ends at once, as without the plugin."""
    cut_short_env.delenv("VLLM_API_KEY")
    pytester.makepyfile(test_cut="import os, signal\ndef test_stop():\n    os.kill(os.getpid(), signal.SIGTERM)\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == -signal.SIGTERM
