"""Issue 41's table, row by row: every input a user gives ends in one line that names it and says what to do.

Each test reproduces a row (a URL urlsplit refuses, a NaN or infinite timeout,
a profile in UTF-16, a YAML alias bomb, a one-character key, a usage error
under --vllm-report, vLLM missing for --vllm-serve) and pins the one line:
exit 4, nothing else on stderr, no INTERNALERROR, no traceback. The merge's
rows are in test_merge_inputs.py, the editable install's in test_packaging.py.
"""

from __future__ import annotations

import http.server
import sys
import threading
import time
import tracemalloc

import pytest
import yaml

from pytest_vllm_conformance.connection import user_files
from pytest_vllm_conformance.connection.secrets import MASK, Redactor
from tests.unit.test_bad_input import QUIET, one_error_line

NEEDS_SERVER = "def test_needs_server(vllm_facts):\n    pass\n"
# 1.1 KB that PyYAML expands to about 10^9 strings through nine levels of aliases (the "billion laughs").
ALIAS_BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("VLLM_URL", "VLLM_API_KEY", "VLLM_CONFORMANCE_PROFILE", "VLLM_CONFORMANCE_REPORT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("given", "line"),
    [
        (
            ("--vllm-url=http://[::1",),
            "ERROR: --vllm-url (from --vllm-url): 'http://[::1' is not valid: Invalid IPv6 URL; "
            "give a server's base URL, e.g. http://[::1]:8000",
        ),
        (
            ("--vllm-url=http://ops:pa55word@[::1?token=s3cret",),
            "ERROR: --vllm-url (from --vllm-url): 'http://***@[::1' is not valid: Invalid IPv6 URL; "
            "give a server's base URL, e.g. http://[::1]:8000",
        ),
        (
            ("--vllm-url=http://127.0.0.1:9", "--vllm-ingress-url=http://[::1"),
            "ERROR: --vllm-ingress-url (from --vllm-ingress-url): 'http://[::1' is not valid: Invalid IPv6 URL; "
            "give a server's base URL, e.g. http://[::1]:8000",
        ),
        (
            ("--vllm-url=http://127.0.0.1:9", "--vllm-timeout=nan"),
            "ERROR: --vllm-timeout (from --vllm-timeout): 'nan' is not valid: must be a finite number",
        ),
        (
            ("--vllm-url=http://127.0.0.1:9", "--vllm-timeout=inf"),
            "ERROR: --vllm-timeout (from --vllm-timeout): 'inf' is not valid: must be a finite number",
        ),
        (
            ("--vllm-url=http://127.0.0.1:9", "--vllm-timeout=1e300"),
            "ERROR: --vllm-timeout (from --vllm-timeout): '1e300' is not valid: must be at most 3600",
        ),
        (
            ("--vllm-url=http://127.0.0.1:9", "--vllm-eval-items=" + "9" * 5000),
            "ERROR: --vllm-eval-items (from --vllm-eval-items): '" + "9" * 5000 + "' is not valid: Exceeds the "
            "limit (4300 digits) for integer string conversion: value has 5000 digits; use "
            "sys.set_int_max_str_digits() to increase the limit",
        ),
        (
            ("--vllm-url=http://127.0.0.1:9", "--vllm-api-key=a"),
            "ERROR: --vllm-api-key (from --vllm-api-key): a key of 1 character(s) is refused: a key shorter than 8 "
            "characters cannot be masked in output without masking ordinary words; give the server a longer one",
        ),
        (
            ("--vllm-url=http://127.0.0.1:9", "--vllm-watermark-key=0x98967f"),
            "ERROR: --vllm-watermark-key: a watermark key below 10000000 is refused: a key that small is found by "
            "trying each one against the detector, and cannot be masked in output without masking ordinary numbers; "
            "give the server a larger one",
        ),
    ],
    ids=["ipv6", "ipv6-credentials", "ingress-ipv6", "nan", "inf", "huge", "digits", "short-key", "small-wm-key"],
)
def test_an_option_out_of_range_is_one_usage_error(pytester, clean_env, given, line):
    pytester.makepyfile(NEEDS_SERVER)
    result = pytester.runpytest(*QUIET, *given)
    assert one_error_line(result) == line
    assert "pa55word" not in result.stdout.str() + result.stderr.str()
    assert "s3cret" not in result.stdout.str() + result.stderr.str()
    assert "98967f" not in result.stdout.str() + result.stderr.str()


def test_a_small_watermark_key_from_the_profiles_variable_is_one_usage_error(pytester, clean_env):
    clean_env.setenv("WM_KEY", "1234567")
    profile = pytester.makefile(".yaml", prod="profile: 1\nname: prod\nwatermark: {key_env: WM_KEY}\n")
    pytester.makepyfile(NEEDS_SERVER)
    result = pytester.runpytest(*QUIET, "--vllm-url=http://127.0.0.1:9", f"--vllm-profile={profile}")
    assert one_error_line(result).startswith(
        "ERROR: WM_KEY (the profile's watermark.key_env): a watermark key below 10000000 is refused"
    )
    assert "1234567" not in result.stdout.str() + result.stderr.str()


def test_the_smallest_watermark_key_is_accepted(pytester, clean_env):
    pytester.makepyfile(NEEDS_SERVER)
    result = pytester.runpytest(*QUIET, "--vllm-url=http://127.0.0.1:9", "--vllm-watermark-key=10000000")
    assert "watermark key" not in result.stdout.str() + result.stderr.str()


def test_an_unbalanced_url_from_the_environment_is_one_usage_error(pytester, clean_env):
    clean_env.setenv("VLLM_URL", "http://[::1")
    pytester.makepyfile(NEEDS_SERVER)
    assert one_error_line(pytester.runpytest(*QUIET)).startswith(
        "ERROR: --vllm-url (from env VLLM_URL): 'http://[::1' is not valid: Invalid IPv6 URL"
    )


@pytest.mark.parametrize(
    ("option", "content", "line"),
    [
        (
            "--vllm-profile",
            "name: x\n".encode("utf-16"),
            "ERROR: profile {path}: UTF-16 text (it starts with a UTF-16 BOM); save it as UTF-8",
        ),
        (
            "--vllm-fleet",
            "replicas:\n  - url: http://127.0.0.1:9\n    name: café\n".encode("latin-1"),
            "ERROR: fleet file {path}: not UTF-8 text (byte 0xe9 at offset 51); save it as UTF-8",
        ),
        (
            "--vllm-baseline",
            "name: x\n".encode("utf-32"),
            "ERROR: --vllm-baseline: profile {path}: UTF-32 text (it starts with a UTF-32 BOM); save it as UTF-8",
        ),
        (
            "--vllm-profile",
            ALIAS_BOMB.encode(),
            "ERROR: profile {path}: not valid YAML: line 2, column 8: an alias (*a): aliases are not read here; "
            "write the value out",
        ),
        (
            "--vllm-profile",
            b"a: " + b"[" * 1000,
            "ERROR: profile {path}: not valid YAML: line 1, column 67: nested deeper than 64 levels",
        ),
    ],
    ids=["utf16-profile", "latin1-fleet", "utf32-baseline", "alias-bomb", "deep"],
)
def test_a_file_that_is_not_plain_utf8_yaml_is_one_usage_error(pytester, clean_env, option, content, line):
    path = pytester.path / "given.yaml"
    path.write_bytes(content)
    pytester.makepyfile(NEEDS_SERVER)
    tracemalloc.start()
    started = time.monotonic()
    try:
        result = pytester.runpytest(*QUIET, "--vllm-url=http://127.0.0.1:9", f"{option}={path}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert one_error_line(result) == line.format(path=path)
    # The alias bomb took 2.29 GB and minutes before; a refused file costs what reading it does.
    assert time.monotonic() - started < 10 and peak < 100 * 1024 * 1024


def test_a_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_bytes("name: notepad\n".encode("utf-8-sig"))
    assert user_files.load_yaml(path, "profile") == {"name": "notepad"}


def test_what_the_plugin_writes_it_reads_back_without_aliases(tmp_path):
    shared = {"model": "m"}
    text = user_files.dump_yaml({"one": shared, "two": shared})
    assert "&" not in text and "*" not in text
    (tmp_path / "written.yaml").write_text(text)
    assert user_files.load_yaml(tmp_path / "written.yaml", "report") == {"one": shared, "two": shared}


def test_secrets_are_masked_as_whole_tokens():
    redactor = Redactor(["sk-abc12345"])
    assert redactor("Bearer sk-abc12345, again: sk-abc12345.") == f"Bearer {MASK}, again: {MASK}."
    assert redactor("key%3Dsk-abc12345&next") == f"key%3D{MASK}&next"  # in a URL-encoded query too
    assert redactor(repr("echoed:\nsk-abc12345")) == f"'echoed:\\n{MASK}'"  # and after an escape in a repr
    # A longer token that merely contains the key is another token: left alone, never garbled.
    assert redactor("sk-abc123456 xsk-abc12345") == "sk-abc123456 xsk-abc12345"
    # A short secret (a URL's password "a") masks only where it stands alone, not every letter a.
    assert (
        Redactor(["a"])("vLLM at http://u:a@host: a health check")
        == f"vLLM at http://u:{MASK}@host: {MASK} health check"
    )


def test_a_usage_error_still_writes_the_report_with_the_error_as_its_verdict(pytester, clean_env):
    pytester.makepyfile(NEEDS_SERVER)
    for given in (("--vllm-timeout=nan",), ()):  # refused at configuration; refused reaching the server
        report = pytester.path / "reports" / "run.yaml"
        result = pytester.runpytest(*QUIET, "--vllm-url=http://127.0.0.1:9", f"--vllm-report={report}", *given)
        line = one_error_line(result)
        written = yaml.safe_load(report.read_text())
        assert (written["result"], written["exit_status"], written["tests"]) == ("usage error", 4, [])
        assert f"ERROR: {written['error']}" == line
        assert report.with_suffix(".md").read_text().startswith("# vLLM conformance report: usage error")
        report.unlink()


def test_serve_without_vllm_installed_is_one_line(pytester, clean_env, tmp_path):
    # An interpreter that cannot import vLLM: this one, without its site-packages.
    python = tmp_path / "python-without-vllm"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    (tmp_path / "model").mkdir()
    pytester.makepyfile(NEEDS_SERVER)
    result = pytester.runpytest(*QUIET, f"--vllm-serve={tmp_path / 'model'}", f"--vllm-serve-python={python}")
    assert one_error_line(result) == (
        f"ERROR: --vllm-serve: vLLM cannot be imported by {sys.executable}: No module named 'vllm'; install the "
        "serve extra (pip install 'pytest-vllm-conformance[serve]') or give --vllm-serve-python=PYTHON of an "
        "environment that has vLLM"
    )


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, format, *args):  # the test's stderr is the run's one line alone
        pass


def test_https_to_a_plain_http_port_says_to_use_http(pytester, clean_env):
    # A plain HTTP server answers a TLS hello with an HTTP 400, which TLS reads as a wrong version.
    plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    pytester.makepyfile(NEEDS_SERVER)
    given = f"https://127.0.0.1:{plain.server_address[1]}"
    try:
        line = one_error_line(pytester.runpytest(*QUIET, f"--vllm-url={given}"))
    finally:
        plain.shutdown()
        plain.server_close()
    assert line.startswith(f"ERROR: cannot reach vLLM at {given}: GET /health: ConnectError: ")
    assert "(the server does not speak TLS there: use http:// instead of https://)" in line
