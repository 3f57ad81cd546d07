"""No secret leaves a run: reports, ``-l`` locals, logs, warnings, headers, JUnit, report files.

The whole-run tests give a known key by each route (``--vllm-api-key``,
``VLLM_API_KEY``, with and without pytest-xdist) to a test file that leaks it
by every path pytest offers, then grep every artifact for it. The same check
against a real server is in tests/integration/test_reports_on_real_vllm.py.
"""

from __future__ import annotations

import logging
import sys

import pytest
import yaml

from pytest_vllm_conformance.reporting.redaction import MASK, LogRecordRedaction, Redactor, scrub_longrepr, url_password

KEY = "sk-redaction-unit-9c41e0"
# A credential that is not one of the run's secrets: masked because it is an Authorization value.
STRANGER = "sk-someone-elses-0b7d"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"key {KEY} here", f"key {MASK} here"),
        ("{'Authorization': 'Bearer abc123'}", "{'Authorization': 'Bearer ***'}"),
        ("Authorization: Basic dXNlcjpwdw==", "Authorization: Basic ***"),
        ("authorization=Token t1", "authorization=Token ***"),
        ("Proxy-Authorization: Bearer zz", "Proxy-Authorization: Bearer ***"),
        ("x-api-key: k-1", "x-api-key: ***"),
        ("Authorization: naked-value", "Authorization: ***"),
        ("[(b'authorization', b'Bearer raw')]", "[(b'authorization', b'Bearer ***')]"),
        # Source lines that build a header stay readable: the value is a placeholder.
        (
            'h = {"Authorization": f"Bearer {settings.api_key.reveal()}"}',
            'h = {"Authorization": f"Bearer {settings.api_key.reveal()}"}',
        ),
        ("authorization, as a word", "authorization, as a word"),
        (f"Authorization: Bearer {MASK}", f"Authorization: Bearer {MASK}"),
    ],
)
def test_redactor_masks_secrets_and_header_values(text, shown):
    assert Redactor([KEY])(text) == shown


@pytest.mark.parametrize(
    ("secret", "text"),
    [
        # httpx's refusal of a key read with its newline: the header value as a bytes repr.
        (f"{KEY}\n", f"Illegal header value b'Bearer {KEY}\\n'"),
        (f"{KEY}\r\n", f"LocalProtocolError(\"Illegal header value b'Bearer {KEY}\\r\\n'\")"),
        (f"{KEY}\r", f"('Bearer {KEY}\\r',)"),
        (f"{KEY}\u00e9", f"'ascii' codec can't encode: 'Bearer {KEY}\\xe9'"),
        (f"{KEY}\u00e9", f"b'Bearer {KEY}\\xc3\\xa9'"),
        (f"{KEY}\t!", f"b'\\x00{KEY}\\t!\\x00'"),
        (f"it's-{KEY}", f'"Bearer it\'s-{KEY}"'),
        (f"it's-\"{KEY}", f"'Bearer it\\'s-\"{KEY}'"),
        (f"back\\slash-{KEY}", f"'Bearer back\\\\slash-{KEY}'"),
    ],
    ids=[
        "LF-bytes",
        "CRLF-exception",
        "CR-tuple",
        "non-ASCII-str",
        "non-ASCII-bytes",
        "controls",
        "quote",
        "both-quotes",
        "backslash",
    ],
)
def test_a_secret_is_masked_whatever_a_repr_makes_of_it(secret, text):
    shown = Redactor([secret])(text)
    assert KEY not in shown and MASK in shown, shown


def test_url_password_is_a_secret():
    assert url_password("http://ops:pa55-word@canary:8000") == "pa55-word"
    assert url_password("http://canary:8000") is None
    assert url_password(None) is None


def _failure_repr(showlocals: bool = True):
    headers = {"Authorization": f"Bearer {KEY}"}  # noqa: F841 - shown by showlocals
    try:
        raise AssertionError(f"refused with key {KEY}")
    except AssertionError:
        return pytest.ExceptionInfo.from_current().getrepr(showlocals=showlocals, style="long")


def test_scrubbed_traceback_keeps_its_structure_and_crash_message():
    longrepr = _failure_repr()
    assert KEY in str(longrepr)
    scrubbed = scrub_longrepr(Redactor([KEY]), longrepr)
    assert scrubbed is longrepr  # the same repr object: JUnit's message and the colours survive
    assert KEY not in str(scrubbed)
    assert scrubbed.reprcrash.message.startswith(f"AssertionError: refused with key {MASK}")
    assert "headers    = {'Authorization': 'Bearer ***'}" in str(scrubbed)


def test_skip_reason_stays_a_skip():
    scrubbed = scrub_longrepr(Redactor([KEY]), ("test_x.py", 3, f"Skipped: key {KEY} refused"))
    assert scrubbed == ("test_x.py", 3, f"Skipped: key {MASK} refused")


def test_log_records_are_scrubbed_when_created():
    redaction = LogRecordRedaction(Redactor([KEY]))
    logger = logging.getLogger("test_redaction")
    before = logging.getLogRecordFactory()
    redaction.install()
    try:
        record = logger.makeRecord(
            "x", logging.WARNING, __file__, 1, "sending %s", ({"Authorization": f"Bearer {KEY}"},), None
        )
        assert record.getMessage() == "sending {'Authorization': 'Bearer ***'}"
        try:
            raise RuntimeError(f"boom with {KEY}")
        except RuntimeError:
            failing = logger.makeRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
        assert KEY not in logging.Formatter().format(failing)
    finally:
        redaction.uninstall()
    assert logging.getLogRecordFactory() == before


# ---- whole runs ----------------------------------------------------------------------

LEAKY_TESTS = f"""
    import logging
    import sys
    import warnings

    import pytest
    from pytest_vllm_conformance import contract

    STRANGER_HEADER = {{"Authorization": "Bearer {STRANGER}"}}

    @pytest.fixture
    def key(vllm_settings):
        return vllm_settings.api_key.reveal()

    @pytest.fixture
    def explodes_in_setup(key):
        raise RuntimeError(f"setup refused {{key}}")

    @pytest.fixture
    def explodes_in_teardown(key):
        yield
        raise RuntimeError(f"teardown refused {{key}}")

    @contract("auth.guarded_route_accepts_key")
    def test_fails_with_the_key_everywhere(key, record_property, record_testsuite_property):
        headers = {{"Authorization": f"Bearer {{key}}"}}
        record_property("sent", key)
        record_testsuite_property("suite_sent", key)
        print("stdout", key, STRANGER_HEADER)
        print("stderr", key, file=sys.stderr)
        logging.getLogger("leaky").warning("sending %s", headers)
        warnings.warn(f"key is {{key}}")
        assert False, f"refused {{headers}} and {{key}}"

    @contract("auth.guarded_route_accepts_key")
    def test_passes_but_prints(key):
        print("passing stdout", key)
        logging.getLogger("leaky").warning("passing log %s", key)

    @contract("auth.guarded_route_refuses_wrong_key")
    def test_skips_with_the_key(key):
        pytest.skip(f"no route for {{key}}")

    @contract("auth.guarded_route_refuses_missing_key")
    def test_setup_error(explodes_in_setup, vllm_evidence):
        vllm_evidence.judged(1, "stand-in checks")

    @contract("auth.guarded_route_refuses_other_scheme")
    def test_teardown_error(explodes_in_teardown, vllm_evidence):
        vllm_evidence.judged(1, "stand-in checks")

    @contract("auth.open_server_declared")
    @pytest.mark.xfail(reason="known")
    def test_xfails_with_the_key(key):
        raise ValueError(f"xfail {{key}}")
"""


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("VLLM_URL", "VLLM_API_KEY", "VLLM_CONFORMANCE_REPORT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("key_from", "workers"),
    [("cli", ()), ("env", ()), ("cli", ("-n", "2")), ("env", ("-n", "2"))],
    ids=["cli", "env", "cli-xdist", "env-xdist"],
)
def test_no_artifact_of_a_leaky_run_holds_the_key(pytester, clean_env, key_from, workers):
    if workers:
        pytest.importorskip("xdist")
    pytester.makepyfile(test_leaky=LEAKY_TESTS)
    # A module that cannot even be collected, naming the key.
    pytester.makepyfile(test_uncollectable=f"raise RuntimeError('import refused {KEY}')\n")
    key_args = [f"--vllm-api-key={KEY}"] if key_from == "cli" else []
    if key_from == "env":
        clean_env.setenv("VLLM_API_KEY", KEY)
    artifacts = {name: pytester.path / name for name in ("junit.xml", "report.yaml", "report.md", "pytest.log")}
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-l",
        "-rA",
        "--tb=long",
        "--continue-on-collection-errors",
        "--log-cli-level=INFO",
        f"--log-file={artifacts['pytest.log']}",
        "--log-file-level=DEBUG",
        "-o",
        "junit_logging=all",
        "-o",
        "junit_log_passing_tests=true",
        f"--junitxml={artifacts['junit.xml']}",
        f"--vllm-report={artifacts['report.yaml']}",
        *key_args,
        *workers,
    )
    outcomes = result.parseoutcomes()
    # setup, teardown, collection (each xdist worker reports its own collection error)
    assert outcomes["failed"] == 1 and outcomes["errors"] >= 3, outcomes
    texts = {"stdout": result.stdout.str(), "stderr": result.stderr.str()}
    texts.update((name, path.read_text()) for name, path in artifacts.items())
    # The leaks happened, masked: the check below is not vacuous.
    assert "refused {'Authorization': 'Bearer ***'} and ***" in texts["junit.xml"]
    failed = {
        entry["test"]: entry["reason"] for entry in yaml.safe_load(texts["report.yaml"])["features"]["auth"]["failed"]
    }
    assert (
        failed["test_leaky.py::test_fails_with_the_key_everywhere"]
        == f"refused {{'Authorization': 'Bearer {MASK}'}} and {MASK}"
    )
    assert failed["test_leaky.py::test_setup_error"] == f"error in setup: RuntimeError: setup refused {MASK}"
    assert "import refused ***" in texts["stdout"]
    if not workers:  # live logging and the log file belong to the process that runs the test
        assert "sending {'Authorization': 'Bearer ***'}" in texts["pytest.log"]
        assert "sending {'Authorization': 'Bearer ***'}" in texts["stdout"]
    for name, text in texts.items():
        assert KEY not in text, f"the key is in {name}"
        assert STRANGER not in text, f"an Authorization value is in {name}"


def test_a_url_with_a_password_is_refused_without_showing_it(pytester, clean_env):
    """httpx would send user:password as Basic auth in place of the API key: refused, the password never shown."""
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--collect-only", "--vllm-url=http://ops:pa55-word@127.0.0.1:1"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --vllm-url (from --vllm-url): 'http://***@127.0.0.1:1' is not valid: a server's base URL takes no "
            "user:password@ (it would replace the API key on every request); give the key with --vllm-api-key"
        ]
    )
    assert "pa55-word" not in result.stdout.str() + result.stderr.str()


def test_embedded_server_log_tail_shown_in_errors_is_scrubbed(tmp_path):
    from pytest_vllm_conformance.connection.launcher import VllmServer
    from pytest_vllm_conformance.connection.secrets import Secret

    log = tmp_path / "vllm-serve.log"
    log.write_text(f"INFO starting\nERROR something echoed {KEY}\n")
    server = VllmServer(tmp_path, api_key=Secret(KEY), log_path=log)
    tail = server.log_tail()
    assert "something echoed ***" in tail and KEY not in tail
    # The key reaches the server through its environment, never its command line.
    server.port = 8000
    assert KEY not in " ".join(server.command())
    assert server.environment()["VLLM_API_KEY"] == KEY
