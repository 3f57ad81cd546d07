"""The preflight lint: its rules by version, its scanning, and the suite run without any server.

``fixtures/manifests`` holds deployment files with known findings for vLLM
0.32.0; the suite must report exactly those (file:line, replacement), fail
a file that does not parse, and pass the clean ones.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from fixtures.verdicts import assert_tests, failed_checks
from suites.preflight import lint as preflight
from tests.conftest import REPO, SUITES

MANIFESTS = REPO / "fixtures" / "manifests"


def lint_text(tmp_path: Path, name: str, text: str, version: str = "0.32.0") -> preflight.FileLint:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    linter = preflight.Linter(preflight.load_rules(), Version(version))
    return linter.lint(preflight.DeploymentFile(path, name))


def first_lines(lint: preflight.FileLint) -> list[str]:
    return [finding.describe().splitlines()[0] for finding in lint.findings]


# ---- rules by version ------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.30.0", []),
        (
            "0.31.0",
            [
                "deploy.sh:1: flag --log-config-file: deprecated in vLLM 0.31.0; "
                "use --logging-config.pylogging_config_file instead"
            ],
        ),
        (
            "0.33.0",
            [
                "deploy.sh:1: flag --log-config-file: deprecated in vLLM 0.33.0; "
                "use --logging-config.pylogging_config_file instead"
            ],
        ),
    ],
)
def test_a_flag_is_reported_only_from_the_version_that_deprecates_it(tmp_path, version, expected):
    assert first_lines(lint_text(tmp_path, "deploy.sh", "vllm serve m --log-config-file x\n", version)) == expected


def test_an_env_var_removed_then_restored_follows_each_range(tmp_path):
    text = "VLLM_ROCM_USE_AITER_FP4_ASM_GEMM=1\n"
    states = {
        v: [f.state.state for f in lint_text(tmp_path, "a.env", text, v).findings]
        for v in ("0.28.0", "0.29.0", "0.31.0", "0.32.0", "0.33.0")
    }
    assert states == {"0.28.0": [], "0.29.0": ["removed"], "0.31.0": [], "0.32.0": [], "0.33.0": ["removed"]}


def test_a_flag_newer_than_the_target_is_reported(tmp_path):
    lint = lint_text(tmp_path, "deploy.sh", "vllm serve m --enable-scale-out\n", "0.29.0")
    assert first_lines(lint) == ["deploy.sh:1: flag --enable-scale-out: not in vLLM 0.29.0 yet; remove it"]
    assert "vllm serve refuses to start" in lint.findings[0].describe()


def test_a_variable_that_never_existed_names_its_replacement_by_version(tmp_path):
    text = "VLLM_ENABLE_SCALE_OUT_ENDPOINTS=1\n"
    assert first_lines(lint_text(tmp_path, "a.env", text, "0.32.0")) == [
        "a.env:1: environment variable VLLM_ENABLE_SCALE_OUT_ENDPOINTS: not a vLLM environment variable in any "
        "release; use --enable-scale-out instead"
    ]
    assert first_lines(lint_text(tmp_path, "a.env", text, "0.29.0"))[0].endswith("in any release; remove it")


def test_a_moved_module_names_the_version_s_new_home(tmp_path):
    text = "from vllm.entrypoints.openai.cli_args import make_arg_parser  # noqa\n"
    assert (
        lint_text(tmp_path, "run.sh", text, "0.32.0").findings[0].state.replacement
        == "vllm.entrypoints.launchers.cli_args"
    )
    assert (
        lint_text(tmp_path, "run.sh", text, "0.33.0").findings[0].state.replacement
        == "vllm.entrypoints.common.cli_args"
    )


# ---- scanning -------------------------------------------------------------------------


def test_names_are_matched_whole_and_in_every_spelling(tmp_path):
    text = (
        "\n".join(
            [
                "VLLM_ENGINE_ITERATION_TIMEOUT_S_EXTRA=1 --disable-cascade-attn-later",  # longer names: no finding
                "python -m vllm.entrypoints.launchers.api_server",  # launchers is not the removed launcher
                "uvicorn vllm.entrypoints.openai.api_server:app --disable_cascade_attn",  # module:attr, underscores
                "python vllm/entrypoints/openai/api_server.py",  # a path to the module
            ]
        )
        + "\n"
    )
    assert [(f.line, f.name) for f in lint_text(tmp_path, "run.sh", text).findings] == [
        (3, "--disable-cascade-attn"),
        (3, "vllm.entrypoints.openai.api_server"),
        (4, "vllm.entrypoints.openai.api_server"),
    ]


def test_comments_are_not_linted_but_quoted_hashes_are_no_comment(tmp_path):
    text = (
        "# VLLM_ENGINE_ITERATION_TIMEOUT_S=1\n"
        "args: [--max-model-len=512]  # was --disable-cascade-attn\n"
        'cmd: "serve #1 --disable-cascade-attn"\n'
    )
    assert [(f.line, f.name) for f in lint_text(tmp_path, "values.yaml", text).findings] == [
        (3, "--disable-cascade-attn")
    ]


# ---- files that do not parse, or cannot be read -----------------------------------


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("bad.yaml", "a: [1, 2\nb: 3\n", "bad.yaml:2: not valid YAML: expected ',' or ']', but got ':'"),
        ("bad.json", '{"a": 1,}', "bad.json:1: not valid JSON: Expecting property name enclosed in double quotes"),
        ("bad.env", "A=1\njust words\n", "bad.env:2: not a KEY=VALUE line: 'just words'"),
        ("Dockerfile", "# comment\nRUN echo\n", "Dockerfile:2: a Dockerfile must start with FROM (or ARG), not RUN"),
        ("bad.sh", 'echo "unclosed\n', "bad.sh:1: not valid shell: unexpected EOF while looking for matching `\"'"),
    ],
)
def test_a_file_that_does_not_parse_is_reported_with_its_line(tmp_path, name, text, problem):
    if name.endswith(".sh") and shutil.which("bash") is None:
        pytest.skip("bash -n is the shell check")
    assert lint_text(tmp_path, name, text).problem == problem


def test_a_helm_template_is_scanned_and_parsed_with_its_actions_blanked(tmp_path):
    text = "{{- if .Values.enabled }}\nargs: {{ toYaml .Values.args }}\nenv: [VLLM_KIMI_K3_GEMM_RS]\n{{- end }}\n"
    lint = lint_text(tmp_path, "templates/d.yaml", text)
    assert (lint.problem, lint.unchecked) == (None, None)
    assert first_lines(lint) == [
        "templates/d.yaml:3: environment variable VLLM_KIMI_K3_GEMM_RS: not in vLLM 0.32.0; "
        "use VLLM_ENABLE_GEMM_RS instead"
    ]


def test_a_helm_template_that_is_no_yaml_even_blanked_is_unchecked_not_passed(tmp_path):
    lint = lint_text(tmp_path, "templates/d.yaml", "args: [{{ .Values.a }}\nenv: x\n")
    assert lint.problem is None
    assert lint.unchecked.startswith(
        "templates/d.yaml: a Helm template that is not YAML even with its template actions blanked"
    )


def test_a_shell_script_without_bash_to_check_it_is_unchecked_not_passed(tmp_path, monkeypatch):
    monkeypatch.setattr(preflight.shutil, "which", lambda name: None)
    lint = lint_text(tmp_path, "run.sh", 'echo "unclosed\n')
    assert (lint.problem, lint.unchecked) == (
        None,
        "run.sh: no bash on this machine to check the script with (bash -n)",
    )


def test_unreadable_and_binary_files_are_reported_not_raised(tmp_path):
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    (tmp_path / "blob.yaml").write_bytes(b"\x00\x01binary")
    (tmp_path / "latin1.env").write_bytes(b"A=caf\xe9\n")
    linter = preflight.Linter(preflight.load_rules(), Version("0.32.0"))
    problems = {f.id: linter.lint(f).problem for f in preflight.deployment_files(tmp_path)}
    assert problems == {
        "blob.yaml": "blob.yaml: not a text file (it holds NUL bytes)",
        "gone.yaml": "gone.yaml: cannot read it: No such file or directory",
        "latin1.env": "latin1.env: not UTF-8 text (byte 5)",
    }


def test_a_directory_that_cannot_be_listed_is_reported(tmp_path, monkeypatch):
    # Root reads every directory, so the refusal is simulated where os.walk reports it.
    def walk(root, onerror):
        onerror(PermissionError(13, "Permission denied", str(tmp_path / "secrets")))
        yield str(tmp_path), [], ["ok.yaml"]

    (tmp_path / "ok.yaml").write_text("a: 1\n")
    monkeypatch.setattr(preflight.os, "walk", walk)
    linter = preflight.Linter(preflight.load_rules(), Version("0.32.0"))
    problems = {f.id: linter.lint(f).problem for f in preflight.deployment_files(tmp_path)}
    assert problems == {"ok.yaml": None, "secrets": "secrets: cannot list this directory: Permission denied"}


def test_discovery_finds_deployment_files_and_skips_the_rest():
    found = [f.id for f in preflight.deployment_files(MANIFESTS)]
    assert found == [
        ".env",
        "Dockerfile",
        "broken.yaml",
        "helm/templates/deployment.yaml",
        "helm/values.yaml",
        "k8s/deployment.yaml",
        "k8s/service.yaml",
        "scripts/serve.sh",
    ]


# ---- the suite, run without any server ----------------------------------------------

PREFLIGHT = tuple(
    f"preflight.{name}" for name in ("file_parses", "no_stale_env_vars", "no_stale_flags", "no_stale_entrypoints")
)
EXPECTED_FAILURES = {
    "preflight.file_parses[broken.yaml]": ["broken.yaml:4: not valid YAML: expected ',' or ']', but got ':'"],
    "preflight.no_stale_env_vars[.env]": [
        "2 environment variable(s) stale for vLLM 0.32.0:",
        ".env:3: environment variable VLLM_MM_HASHER_ALGORITHM: not in vLLM 0.32.0; use --mm-hasher-algorithm instead",
        ".env:4: environment variable VLLM_KIMI_K3_GEMM_RS: not in vLLM 0.32.0; use VLLM_ENABLE_GEMM_RS instead",
    ],
    "preflight.no_stale_env_vars[broken.yaml]": [
        "broken.yaml:5: environment variable VLLM_ENGINE_ITERATION_TIMEOUT_S: not in vLLM 0.32.0; remove it",
    ],
    "preflight.no_stale_env_vars[helm/values.yaml]": [
        "helm/values.yaml:6: environment variable VLLM_ENGINE_ITERATION_TIMEOUT_S: not in vLLM 0.32.0; remove it",
    ],
    "preflight.no_stale_env_vars[k8s/deployment.yaml]": [
        "k8s/deployment.yaml:28: environment variable VLLM_ENABLE_SCALE_OUT_ENDPOINTS: not a vLLM environment "
        "variable in any release; use --enable-scale-out instead",
        'vLLM warns "Unknown vLLM environment variable detected" and ignores it',
    ],
    "preflight.no_stale_env_vars[scripts/serve.sh]": [
        "scripts/serve.sh:4: environment variable VLLM_ENGINE_ITERATION_TIMEOUT_S: not in vLLM 0.32.0; remove it",
    ],
    "preflight.no_stale_flags[broken.yaml]": [
        "broken.yaml:3: flag --disable-cascade-attn: deprecated in vLLM 0.32.0; remove it"
    ],
    "preflight.no_stale_flags[helm/values.yaml]": [
        "helm/values.yaml:9: flag --enable-mamba-fine-grained-prefix-cache: not in vLLM 0.32.0; "
        "use --enable-mamba-shared-prefix-checkpoint instead",
    ],
    "preflight.no_stale_flags[k8s/deployment.yaml]": [
        "2 flag(s) stale for vLLM 0.32.0:",
        "k8s/deployment.yaml:23: flag --log-config-file: deprecated in vLLM 0.32.0; "
        "use --logging-config.pylogging_config_file instead",
        "k8s/deployment.yaml:24: flag --disable-cascade-attn: deprecated in vLLM 0.32.0; remove it",
        'vLLM says: "--disable-cascade-attn is deprecated and has no effect since cascade attention has been removed.',
    ],
    "preflight.no_stale_flags[scripts/serve.sh]": [
        "scripts/serve.sh:5: flag --log-config-file: deprecated in vLLM 0.32.0; "
        "use --logging-config.pylogging_config_file instead",
    ],
    "preflight.no_stale_entrypoints[Dockerfile]": [
        "Dockerfile:6: module vllm.entrypoints.grpc_server: deprecated in vLLM 0.32.0; "
        "use vllm serve <model_path> --grpc instead",
    ],
    "preflight.no_stale_entrypoints[k8s/deployment.yaml]": [
        "k8s/deployment.yaml:20: module vllm.entrypoints.openai.api_server: deprecated in vLLM 0.32.0; "
        "use vllm serve instead",
    ],
}


def run_preflight(pytester: pytest.Pytester, manifests: Path, *args: str):
    """The real suites with no --vllm-url at all: -m preflight must not ask for a server."""
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        str(SUITES),
        "-m",
        "preflight",
        f"--vllm-manifests={manifests}",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        *args,
        timeout=300,
    )
    return result, junit


@pytest.mark.pins(failed=PREFLIGHT, healthy=PREFLIGHT)
def test_the_suite_reports_exactly_the_known_findings_without_a_server(pytester):
    result, junit = run_preflight(pytester, MANIFESTS, "--vllm-target-version=0.32.0")
    failed = failed_checks(junit)
    assert set(failed) == set(EXPECTED_FAILURES)
    for name, fragments in EXPECTED_FAILURES.items():
        for fragment in fragments:
            assert fragment in failed[name], f"{name}: {fragment!r} not in {failed[name]!r}"
    # Nothing a comment names, nothing a clean file holds.
    assert "--enable-bf16x3-router-gemm" not in junit.read_text()
    assert_tests(
        junit,
        {
            "preflight.file_parses[helm/templates/deployment.yaml]": "passed",
            **{f"{contract}[k8s/service.yaml]": "passed" for contract in PREFLIGHT},
        },
    )
    assert result.ret == 1
    result.stdout.no_fnmatch_line("*no vLLM server to test*")


@pytest.mark.pins(failed={"preflight.no_stale_flags", "preflight.no_stale_env_vars"})
def test_the_same_files_pass_for_a_version_before_the_changes(pytester):
    # For 0.28.0 only the flags it does not have yet remain: --max-num-queued-reqs arrived in 0.29.
    _, junit = run_preflight(pytester, MANIFESTS, "--vllm-target-version=0.28.0")
    failed = failed_checks(junit)
    assert set(failed) == {
        "preflight.file_parses[broken.yaml]",
        "preflight.no_stale_env_vars[.env]",  # VLLM_MM_HASHER_ALGORITHM was already deprecated in 0.28
        "preflight.no_stale_env_vars[k8s/deployment.yaml]",  # VLLM_ENABLE_SCALE_OUT_ENDPOINTS never existed
        "preflight.no_stale_flags[k8s/deployment.yaml]",
    }
    assert (
        "k8s/deployment.yaml:25: flag --max-num-queued-reqs: not in vLLM 0.28.0 yet; remove it"
        in (failed["preflight.no_stale_flags[k8s/deployment.yaml]"])
    )
    assert "deprecated in vLLM 0.28.0" in failed["preflight.no_stale_env_vars[.env]"]


@pytest.mark.pins(failed={"preflight.file_parses"}, healthy={"preflight.no_stale_flags"})
def test_a_broken_directory_never_stops_the_run(pytester, tmp_path):
    (tmp_path / "ok.yaml").write_text("a: 1\n")
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "missing.yaml")
    result, junit = run_preflight(pytester, tmp_path, "--vllm-target-version=0.32.0")
    failed = failed_checks(junit)
    assert set(failed) == {"preflight.file_parses[gone.yaml]"}
    assert "gone.yaml: cannot read it: No such file or directory" in failed["preflight.file_parses[gone.yaml]"]
    assert_tests(
        junit, {"preflight.no_stale_flags[gone.yaml]": "skipped", "preflight.no_stale_flags[ok.yaml]": "passed"}
    )


def test_without_manifests_or_version_the_suite_skips_with_the_reason(pytester):
    result = pytester.runpytest_subprocess(str(SUITES), "-m", "preflight", "-p", "no:cacheprovider", "-rs", timeout=300)
    result.stdout.fnmatch_lines(
        ["*not claimed: not given: --vllm-manifests=DIR (with --vllm-target-version=X when no server is given)*"]
    )
    result = pytester.runpytest_subprocess(
        str(SUITES), "-m", "preflight", f"--vllm-manifests={MANIFESTS}", "-p", "no:cacheprovider", "-rs", timeout=300
    )
    result.stdout.fnmatch_lines(["*no target version to lint for: give --vllm-target-version=X*"])
    # Manifests given claim the suite; with nothing linted, the run judged nothing and does not pass.
    result.stdout.fnmatch_lines(["*nothing was judged*"])
    assert result.ret == 1


def test_a_manifest_s_aliases_and_nesting_and_bom_are_read_bounded(tmp_path):
    """A kilobyte of nested aliases is checked without expanding it; a BOM is UTF-8; nesting past recursion is named."""
    from tests.unit.test_every_input import ALIAS_BOMB

    assert lint_text(tmp_path, "compose.yaml", ALIAS_BOMB).problem is None
    (tmp_path / "bom.yaml").write_bytes("args: [--port, '8000']\n".encode("utf-8-sig"))
    linter = preflight.Linter(preflight.load_rules(), Version("0.32.0"))
    assert linter.lint(preflight.DeploymentFile(tmp_path / "bom.yaml", "bom.yaml")).problem is None
    assert lint_text(tmp_path, "deep.yaml", "a: " + "[" * 5000).problem == (
        "deep.yaml: not valid YAML: nested too deep to read"
    )
