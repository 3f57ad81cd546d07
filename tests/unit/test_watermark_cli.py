"""The watermark detector's command line: JSON Lines of token ids in, one verdict per line, the key never echoed.

It runs as ``python -m pytest_vllm_conformance.watermark`` (here, in a
subprocess) and as the ``vllm-conformance-watermark`` console script.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pytest_vllm_conformance.watermark import DualKeyGumbelDetector
from pytest_vllm_conformance.watermark import __main__ as cli
from tests.unit.watermark_vectors import SECRET_KEY, SECRET_SPELLINGS, SEQUENCE

REPO = Path(__file__).resolve().parents[2]


def _run_cli(args: list[str], env_key: str | None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "WM_TEST_KEY"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if env_key is not None:
        env["WM_TEST_KEY"] = env_key
    result = subprocess.run(
        [sys.executable, "-m", "pytest_vllm_conformance.watermark", "detect", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    for spelling in SECRET_SPELLINGS:
        assert spelling not in result.stdout
        assert spelling not in result.stderr
    return result


def test_cli_detects_a_file(tmp_path: Path) -> None:
    lines = [SEQUENCE, [], [3, 1, 4, 1, 5, 9, 2, 6]]
    path = tmp_path / "tokens.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = _run_cli(
        [
            "--algorithm",
            "dual_key_gumbel",
            "--context-width",
            "4",
            "--alpha",
            "0.25",
            "--key-env",
            "WM_TEST_KEY",
            str(path),
        ],
        env_key=str(SECRET_KEY),
    )
    assert result.returncode == 0, result.stderr
    outputs = [json.loads(line) for line in result.stdout.splitlines()]
    detector = DualKeyGumbelDetector(SECRET_KEY, context_width=4, alpha=0.25)
    assert outputs == [detector.detect(line).to_dict() for line in lines]
    assert list(outputs[0]) == ["score", "p_value", "num_scored_tokens", "is_watermarked"]


def test_cli_reads_stdin_and_matches_the_vectors() -> None:
    result = _run_cli(
        ["--algorithm", "gumbel", "--context-width", "2", "--no-dedup", "--key-env", "WM_TEST_KEY", "-"],
        env_key="12345",
        stdin=json.dumps(SEQUENCE) + "\n",
    )
    assert result.returncode == 0, result.stderr
    (output,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert output["num_scored_tokens"] == 15
    assert output["score"] == pytest.approx(14.026894688699386, rel=1e-12)
    assert abs(output["p_value"] - 0.5675861922105809) <= 1e-12
    assert output["is_watermarked"] is False


@pytest.mark.parametrize(
    "bad_line",
    [
        '{"tokens": [1]}',
        "[1, 2.5]",
        "[1, -3]",
        "[1, 2",
        "",
        '[1, "2"]',
        "[true]",
        "[" + "9" * 5000 + "]",
        f"[{2**63}]",
    ],
    ids=[
        "object",
        "float",
        "negative",
        "truncated",
        "empty",
        "string",
        "bool",
        "huge-literal",
        "beyond-int64",
    ],
)
def test_cli_bad_line_names_the_line(tmp_path: Path, bad_line: str) -> None:
    path = tmp_path / "tokens.jsonl"
    path.write_text(f"[1, 2, 3]\n[4, 5]\n{bad_line}\n[6]\n")
    result = _run_cli(
        ["--algorithm", "gumbel", "--context-width", "4", "--key-env", "WM_TEST_KEY", str(path)],
        env_key=str(SECRET_KEY),
    )
    assert result.returncode == 2
    assert "line 3" in result.stderr
    assert "Traceback" not in result.stderr
    # Lines before the bad one were already answered; nothing after it.
    assert len(result.stdout.splitlines()) == 2


@pytest.mark.parametrize(
    "env_key",
    [
        None,
        "",
        "not-a-key",
        f"{SECRET_KEY}x",
        str(2**64 + SECRET_KEY),
        "-" + str(SECRET_KEY),
        str(SECRET_KEY) * 400,
    ],
    ids=["missing", "empty", "text", "trailing-garbage", "too-big", "negative", "huge"],
)
def test_cli_key_errors(tmp_path: Path, env_key: str | None) -> None:
    path = tmp_path / "tokens.jsonl"
    path.write_text("[1, 2, 3]\n")
    result = _run_cli(
        ["--algorithm", "gumbel", "--context-width", "4", "--key-env", "WM_TEST_KEY", str(path)],
        env_key=env_key,
    )
    assert result.returncode == 2
    assert "WM_TEST_KEY" in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    if env_key:
        assert env_key not in result.stderr


def test_cli_accepts_hex_key() -> None:
    result = _run_cli(
        ["--algorithm", "gumbel", "--context-width", "4", "--key-env", "WM_TEST_KEY", "-"],
        env_key=hex(12345),
        stdin=json.dumps(SEQUENCE) + "\n",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["num_scored_tokens"] == 13


@pytest.mark.parametrize(
    "args",
    [
        ["--algorithm", "gumbel", "--context-width", "4", "--alpha", "0.2"],
        ["--algorithm", "gumbel", "--context-width", "4", "--p-value-threshold", "1.5"],
        ["--algorithm", "dual_key_gumbel", "--context-width", "4", "--alpha", "2"],
        ["--algorithm", "kgw", "--context-width", "4"],
        ["--algorithm", "gumbel", "--context-width", "0"],
        ["--algorithm", "gumbel"],
    ],
    ids=["alpha-with-gumbel", "threshold", "alpha-range", "algorithm", "width", "no-width"],
)
def test_cli_usage_errors(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "tokens.jsonl"
    path.write_text("[1, 2, 3]\n")
    result = _run_cli([*args, "--key-env", "WM_TEST_KEY", str(path)], env_key=str(SECRET_KEY))
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_cli_never_takes_the_key_from_argv() -> None:
    result = _run_cli(
        ["--algorithm", "gumbel", "--context-width", "4", "--key", str(SECRET_KEY), "-"],
        env_key=None,
        stdin="[1]\n",
    )
    assert result.returncode == 2
    assert result.stdout == ""
    # _run_cli already checked that the mistyped secret is not echoed back.
    assert "--key-env" in result.stderr


def test_cli_key_env_given_the_key_itself() -> None:
    result = _run_cli(
        ["--algorithm", "gumbel", "--context-width", "4", "--key-env", str(SECRET_KEY), "-"],
        env_key=None,
        stdin="[1]\n",
    )
    assert result.returncode == 2
    assert "NAME of an environment variable" in result.stderr


def test_the_console_script_is_this_command_line() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts[cli.SCRIPT].partition(":")
    assert (module, function) == (cli.__name__, "main")


@pytest.mark.parametrize(
    ("argv0", "prog"),
    [("/usr/local/bin/vllm-conformance-watermark", cli.SCRIPT), (cli.__file__, cli.MODULE_PROG)],
    ids=["console-script", "python-m"],
)
def test_messages_name_the_command_as_it_was_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv0: str, prog: str
) -> None:
    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["detect", "--algorithm", "kgw", "--context-width", "4", "--key-env", "WM_TEST_KEY", "-"])
    assert exit_info.value.code == cli.EXIT_USAGE
    usage = " ".join(capsys.readouterr().err.split())  # argparse wraps a long usage line
    assert usage.startswith(f"usage: {prog} detect ")


def test_every_argument_is_documented() -> None:
    """docs/watermark.md is where the command line is documented: a new argument must land there too."""
    page = (REPO / "docs" / "watermark.md").read_text(encoding="utf-8")
    commands = next(action for action in cli._build_parser()._actions if isinstance(action.choices, dict))
    detect = commands.choices["detect"]
    flags = [flag for action in detect._actions for flag in action.option_strings if flag not in ("-h", "--help")]
    assert flags and [flag for flag in flags if not re.search(f"`{re.escape(flag)}[` ]", page)] == []
    assert f"{cli.SCRIPT} detect" in page
