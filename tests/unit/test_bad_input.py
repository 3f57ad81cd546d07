"""Bad input from the server or the user ends in one line naming the problem, never a traceback.

The broken servers here are our fault proxy answering on vLLM's behalf (a
real vLLM cannot answer /version with a list or redirect /health to a login
page), in front of the hostile server, which answers 404 to everything else.
"""

from __future__ import annotations

import subprocess

import pytest

from fixtures.fault_proxy import FaultProxy, Respond
from fixtures.hostile_server import HostileServer

QUIET = ("-p", "no:cacheprovider")
MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 512}]}


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("VLLM_URL", "VLLM_API_KEY", "VLLM_CONFORMANCE_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def hostile():
    with HostileServer() as server:
        yield server


def broken_vllm(upstream: str, *rules: Respond, tls: tuple[str, str] | None = None) -> FaultProxy:
    """A server that answers discovery as vLLM does, except where ``rules`` say otherwise."""
    usual = [
        Respond(status=200, body_json={}, path="/health"),
        Respond(status=200, body_json=MODELS, path="/v1/models"),
        Respond(status=200, body_json={"version": "0.32.0"}, path="/version"),
    ]
    return FaultProxy(upstream, rules=[*rules, *usual], tls=tls)


def one_error_line(result: pytest.RunResult) -> str:
    """The run's error, which must be one line with no traceback."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1 and "Traceback" not in result.stderr.str() and "INTERNALERROR" not in result.stdout.str(), (
        result.errlines
    )
    return errors[0]


def test_a_version_that_is_not_an_object_fails_its_contract_not_the_run(pytester, clean_env, hostile):
    pytester.makepyfile(
        "from pytest_vllm_conformance import contract\n"
        "@contract('discovery.max_model_len_published')\n"
        "def test_facts(vllm_facts, vllm_evidence):\n"
        "    vllm_evidence.judged(1, 'facts')\n    assert vllm_facts.version is None\n"
    )
    with broken_vllm(hostile.url, Respond(status=200, body_json=["0.32.0"], path="/version")) as server:
        result = pytester.runpytest(*QUIET, f"--vllm-url={server.url}")
    assert "INTERNALERROR" not in result.stdout.str()
    result.assert_outcomes(passed=1)


def test_a_url_with_a_query_string_is_one_usage_error_that_hides_the_query(pytester, clean_env):
    result = pytester.runpytest(*QUIET, "--vllm-url=http://host:8000/vllm/?token=s3cret")
    line = one_error_line(result)
    assert line == (
        "ERROR: --vllm-url (from --vllm-url): 'http://host:8000/vllm/?...' is not valid: a server's base URL "
        "takes no query string; give it without"
    )
    assert "s3cret" not in result.stdout.str() + result.stderr.str()


def test_a_redirect_to_a_login_page_is_named(pytester, clean_env, hostile):
    login = Respond(status=302, headers={"location": "https://login.example.com/sso?next=abc"}, path="/health")
    pytester.makepyfile("def test_needs_server(vllm_facts):\n    pass\n")
    with broken_vllm(hostile.url, login) as server:
        result = pytester.runpytest(*QUIET, f"--vllm-url={server.url}")
    assert one_error_line(result) == (
        f"ERROR: cannot reach vLLM at {server.url}: GET /health was redirected (302) to "
        "https://login.example.com/sso: a login page or another host stands there; give the vLLM server's own URL"
    )


def test_a_path_that_is_not_the_server_s_root_path_is_named(pytester, clean_env, hostile):
    pytester.makepyfile("def test_needs_server(vllm_facts):\n    pass\n")
    with broken_vllm(hostile.url) as server:
        result = pytester.runpytest(*QUIET, f"--vllm-url={server.url}/vllm/")
    assert one_error_line(result) == (
        f"ERROR: cannot reach vLLM at {server.url}/vllm: GET /health answered 404, not 200 "
        "(is /vllm the server's --root-path? else give its base URL)"
    )


@pytest.fixture(scope="module")
def private_ca(tmp_path_factory):
    """A CA of our own and a certificate for 127.0.0.1 it signed: (ca.pem, cert.pem, key.pem)."""
    where = tmp_path_factory.mktemp("tls")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=conformance test CA",
    )
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out", "server.csr", "-subj", "/CN=127.0.0.1"
    )
    (where / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "cert.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    )
    return where / "ca.pem", where / "cert.pem", where / "key.pem"


def test_https_with_a_private_ca_names_the_option_and_works_with_it(pytester, clean_env, hostile, private_ca):
    ca, cert, key = private_ca
    pytester.makepyfile(
        "from pytest_vllm_conformance import contract\n"
        "@contract('discovery.max_model_len_published')\n"
        "def test_facts(vllm_facts, vllm_evidence):\n"
        "    vllm_evidence.judged(1, 'facts')\n    assert vllm_facts.max_model_len == 512\n"
    )
    with broken_vllm(hostile.url, tls=(str(cert), str(key))) as server:
        untrusted = pytester.runpytest(*QUIET, f"--vllm-url={server.url}", "--vllm-timeout=5")
        trusted = pytester.runpytest(*QUIET, f"--vllm-url={server.url}", f"--vllm-ca-bundle={ca}")
    line = one_error_line(untrusted)
    assert line.startswith(f"ERROR: cannot reach vLLM at {server.url}: GET /health: ")
    assert "CERTIFICATE_VERIFY_FAILED" in line and "give --vllm-ca-bundle=PATH with the CA that signed it" in line
    trusted.assert_outcomes(passed=1)


# ---- a key as a secret file holds it ------------------------------------------------------

FILE_KEY = "sk-from-a-secret-file-5e1b"
USES_THE_KEY = (
    "def test_key(vllm_settings, vllm_facts):\n"
    f"    assert vllm_settings.api_key.reveal() == {FILE_KEY!r}\n"
    "    assert vllm_facts.max_model_len == 512\n"
)


def everything_written(pytester: pytest.Pytester, result: pytest.RunResult) -> str:
    files = [path.read_text() for path in pytester.path.iterdir() if path.suffix in (".yaml", ".md", ".xml")]
    return "\n".join([result.stdout.str(), result.stderr.str(), *files])


@pytest.mark.parametrize("ending", ["\n", "\r\n"], ids=["LF", "CRLF"])
@pytest.mark.parametrize("given", ["env", "cli"])
def test_a_key_from_a_secret_file_loses_its_one_trailing_newline(pytester, clean_env, hostile, ending, given):
    pytester.makepyfile(USES_THE_KEY)
    key = ["--vllm-api-key", FILE_KEY + ending] if given == "cli" else []
    if given == "env":
        clean_env.setenv("VLLM_API_KEY", FILE_KEY + ending)
    with broken_vllm(hostile.url) as server:
        result = pytester.runpytest(
            *QUIET, *key, f"--vllm-url={server.url}", "--vllm-report=report.yaml", "--junitxml=junit.xml"
        )
    result.assert_outcomes(passed=1)
    assert FILE_KEY not in everything_written(pytester, result)


@pytest.mark.parametrize(
    ("key", "said"),
    [
        (FILE_KEY + "\r", "character 27 of 27 is a control character (U+000D)"),
        (FILE_KEY + "\n\n", "character 27 of 27 is a control character (U+000A)"),
        ("sk-from-a\tsecret-file", "character 10 of 21 is a control character (U+0009)"),
        ("sk-from-a-secret-\x1bfile", "character 18 of 22 is a control character (U+001B)"),
        (FILE_KEY + "é", "character 27 of 27 is not ASCII (U+00E9)"),
    ],
    ids=["CR", "two-LF", "tab", "ESC", "non-ASCII"],
)
@pytest.mark.parametrize("given", ["env", "cli"])
def test_a_key_no_header_can_carry_is_one_line_that_never_shows_it(pytester, clean_env, key, said, given):
    pytester.makepyfile(USES_THE_KEY)
    cli = [f"--vllm-api-key={key}"] if given == "cli" else []
    if given == "env":
        clean_env.setenv("VLLM_API_KEY", key)
    result = pytester.runpytest(*QUIET, *cli, "--vllm-url=http://127.0.0.1:1", "--vllm-report=report.yaml")
    where = "--vllm-api-key" if given == "cli" else "env VLLM_API_KEY"
    assert one_error_line(result) == f"ERROR: --vllm-api-key (from {where}): *** is not valid: {said}: " + (
        "an HTTP header carries printable ASCII only, so no server can be sent this key"
        if "ASCII" in said
        else "a key is one line of printable ASCII (one trailing newline, as a secret file ends, is dropped)"
    )
    written = everything_written(pytester, result)
    assert "exit_status: 4" in written
    assert "sk-from-a" not in written


# ---- transport settings, each in one line ---------------------------------------------------


@pytest.fixture(scope="module")
def encrypted_key(private_ca, tmp_path_factory):
    _, _, key = private_ca
    encrypted = tmp_path_factory.mktemp("encrypted") / "key.pem"
    subprocess.run(
        ["openssl", "pkey", "-in", str(key), "-aes256", "-passout", "pass:secret-pass", "-out", str(encrypted)],
        check=True,
        capture_output=True,
    )
    return encrypted


def test_each_bad_transport_setting_is_one_line_naming_its_file(pytester, clean_env, private_ca, encrypted_key):
    ca, cert, key = private_ca
    garbage = pytester.path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    missing = pytester.path / "missing-cert.pem"
    pytester.makepyfile("def test_needs_server(vllm_facts):\n    pass\n")
    url = "--vllm-url=http://127.0.0.1:1"
    cases = {
        (f"--vllm-ca-bundle={garbage}",): f"ERROR: --vllm-ca-bundle {garbage}: not a PEM bundle of CA certificates (",
        (f"--vllm-client-cert={missing}",): f"ERROR: --vllm-client-cert {missing}: no such file: give a PEM file",
        (f"--vllm-client-cert={cert}", f"--vllm-client-key={encrypted_key}"): (
            f"ERROR: --vllm-client-key {encrypted_key}: the key is encrypted (it asks for a passphrase); give an "
            "unencrypted copy"
        ),
        (f"--vllm-client-cert={ca}", f"--vllm-client-key={key}"): (
            f"ERROR: --vllm-client-cert {ca} with --vllm-client-key {key}: not a PEM certificate and its private key "
            "that match ("
        ),
    }
    for args, said in cases.items():
        result = pytester.runpytest(*QUIET, url, *args)
        line = one_error_line(result)
        assert line.startswith(said), line


def test_serve_on_a_folder_that_is_not_there_is_refused_before_vllm_starts(pytester, clean_env):
    pytester.makepyfile("def test_needs_server(vllm_facts):\n    pass\n")
    result = pytester.runpytest(*QUIET, f"--vllm-serve={pytester.path / 'no-such-model'}")
    assert one_error_line(result) == (
        f"ERROR: --vllm-serve: {pytester.path / 'no-such-model'} does not exist: give the model's directory "
        "(config.json, weights)"
    )
    assert result.duration < 30
