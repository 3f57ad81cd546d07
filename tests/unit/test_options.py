"""Options: precedence (cli > env > ini > default), the header, and the key never shown."""

import pytest

SECRET = "sk-unit-secret-3f9a"
QUIET = ("-p", "no:cacheprovider")


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("VLLM_URL", "VLLM_API_KEY", "VLLM_CONFORMANCE_TIMEOUT", "VLLM_CONFORMANCE_MAX_BODY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def settings_of(pytester, *args):
    """Resolve settings inside a pytester run and print them as 'key=value (source)'."""
    pytester.makeconftest(
        """
        from pytest_vllm_conformance.plugin.run import run_state

        def pytest_collection_finish(session):
            state = run_state(session.config)
            for key in ("url", "timeout", "max_body", "model", "trust_env"):
                print(f"SETTING {key}={getattr(state.settings, key)!r} ({state.option_sources[key]})")
        """
    )
    result = pytester.runpytest("-s", *QUIET, *args)
    return {
        line.split()[1].split("=")[0]: line.split(" ", 1)[1] for line in result.outlines if line.startswith("SETTING ")
    }


def test_defaults_apply_without_any_source(pytester, clean_env):
    seen = settings_of(pytester)
    assert seen["timeout"] == "timeout=30.0 (default)"
    assert seen["max_body"] == "max_body=1048576 (default)"


def test_cli_beats_env_beats_ini(pytester, clean_env):
    pytester.makeini("[pytest]\nvllm_timeout = 7\nvllm_max_body = 2048\nvllm_model = from-ini\n")
    clean_env.setenv("VLLM_CONFORMANCE_TIMEOUT", "9")
    seen = settings_of(pytester, "--vllm-timeout=11")
    assert seen["timeout"] == "timeout=11.0 (cli)"
    seen = settings_of(pytester)
    assert seen["timeout"] == "timeout=9.0 (env)"
    assert seen["max_body"] == "max_body=2048 (ini)"
    assert seen["model"] == "model='from-ini' (ini)"


def test_trust_env_is_set_from_the_command_line_the_environment_or_the_ini_file(pytester, clean_env):
    clean_env.delenv("VLLM_CONFORMANCE_TRUST_ENV", raising=False)
    assert settings_of(pytester)["trust_env"] == "trust_env=False (default)"
    pytester.makeini("[pytest]\nvllm_trust_env = true\n")
    assert settings_of(pytester)["trust_env"] == "trust_env=True (ini)"
    clean_env.setenv("VLLM_CONFORMANCE_TRUST_ENV", "off")  # the environment beats the ini file
    assert settings_of(pytester)["trust_env"] == "trust_env=False (env)"
    assert settings_of(pytester, "--vllm-trust-env")["trust_env"] == "trust_env=True (cli)"
    clean_env.setenv("VLLM_CONFORMANCE_TRUST_ENV", "sometimes")
    result = pytester.runpytest(*QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--vllm-trust-env (from env VLLM_CONFORMANCE_TRUST_ENV): 'sometimes' is not valid*"])


def test_invalid_value_is_one_usage_error_naming_its_source(pytester, clean_env):
    clean_env.setenv("VLLM_CONFORMANCE_MAX_BODY", "lots")
    result = pytester.runpytest(*QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--vllm-max-body (from env VLLM_CONFORMANCE_MAX_BODY): 'lots' is not valid*"])


def test_api_key_never_appears_in_header_or_output(pytester, clean_env):
    clean_env.setenv("VLLM_API_KEY", SECRET)
    pytester.makepyfile(
        """
        def test_shows_settings(vllm_settings):
            print(repr(vllm_settings.api_key), vllm_settings.api_key)
            assert False, f"key is {vllm_settings.api_key}"
        """
    )
    # No target: the test fails at the fixture; the header must still name the option's source.
    result = pytester.runpytest(*QUIET, "-v", f"--junitxml={pytester.path / 'j.xml'}")
    output = result.stdout.str() + result.stderr.str()
    assert "vllm option --vllm-api-key: set (from env)" in output
    assert SECRET not in output
    assert SECRET not in (pytester.path / "j.xml").read_text()


def test_list_contracts_prints_the_catalogue_and_exits(pytester, clean_env):
    result = pytester.runpytest("--vllm-list-contracts")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["discovery: *", "  discovery.version_parses  [[]vLLM >=0.28[]]  GET /version names a PEP 440 version."]
    )


def test_unreachable_server_is_one_clear_error(pytester, clean_env):
    pytester.makepyfile("def test_needs_server(vllm_facts):\n    pass\n")
    result = pytester.runpytest(*QUIET, "--vllm-url=http://127.0.0.1:1", "--vllm-timeout=3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: cannot reach vLLM at http://127.0.0.1:1: GET /health: ConnectError*"])
    assert "test_needs_server" not in result.stdout.str()


def test_tests_needing_a_server_without_target_stop_once(pytester, clean_env):
    pytester.makepyfile("def test_a(vllm_client):\n    pass\n\ndef test_b(vllm_facts):\n    pass\n")
    result = pytester.runpytest(*QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: no vLLM server to test: give --vllm-url=URL, or --vllm-serve=MODEL_DIR*"])


def test_settings_hold_exactly_the_option_table():
    """One field per option, each typed by the option's kind: the two cannot drift apart."""
    from dataclasses import fields

    from pytest_vllm_conformance.connection.settings import Settings
    from pytest_vllm_conformance.plugin.option_table import OPTIONS

    assert {field.name for field in fields(Settings)} == {option.key for option in OPTIONS}
    for option in OPTIONS:
        default = Settings.__dataclass_fields__[option.key].default
        assert default == option.default, (option.key, default, option.default)
