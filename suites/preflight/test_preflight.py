"""Deployment files use nothing the target vLLM version removed, deprecated or never had.

Needs no server: ``pytest suites -m preflight --vllm-manifests=deploy/
--vllm-target-version=0.32.0``. Every YAML (Kubernetes manifests, Helm
values and templates), JSON, .env, Dockerfile and shell script under the
directory is one case; each environment variable, ``vllm serve`` flag and
vLLM module it names is looked up in the version's deprecation data, and
reported with file:line and the replacement. A file that cannot be read or
parsed fails its own test and stops nothing else.
"""

import pytest

from pytest_vllm_conformance import contract, each

from .lint import Linter, deployment_file_cases, describe_all, load_rules


@pytest.fixture(scope="module")
def linter(vllm_target_version):
    """The lint rules for --vllm-target-version (else the server's version); needs no server."""
    if vllm_target_version is None:
        pytest.skip("no target version to lint for: give --vllm-target-version=X (or a server to read it from)")
    return Linter(load_rules(), vllm_target_version)


def _findings(linter, deployment_file, kind, evidence):
    lint = linter.lint(deployment_file)
    if lint.text is None:
        pytest.skip(f"could not run: {lint.problem}")
    evidence.judged(1, "deployment files")
    return lint.of_kind(kind)


def _fail_on(findings, what, linter):
    if findings:
        pytest.fail(f"{len(findings)} {what} stale for vLLM {linter.version}:\n{describe_all(findings)}", pytrace=False)


@contract("preflight.file_parses")
@each("deployment_file", deployment_file_cases)
def test_file_parses(deployment_file, linter, vllm_evidence):
    lint = linter.lint(deployment_file)
    if lint.problem:
        pytest.fail(lint.problem, pytrace=False)
    if lint.unchecked:
        pytest.skip(f"could not check: {lint.unchecked}")
    vllm_evidence.judged(1, "deployment files")


@contract("preflight.no_stale_env_vars")
@each("deployment_file", deployment_file_cases)
def test_no_stale_env_vars(deployment_file, linter, vllm_evidence):
    _fail_on(_findings(linter, deployment_file, "env", vllm_evidence), "environment variable(s)", linter)


@contract("preflight.no_stale_flags")
@each("deployment_file", deployment_file_cases)
def test_no_stale_flags(deployment_file, linter, vllm_evidence):
    _fail_on(_findings(linter, deployment_file, "flag", vllm_evidence), "flag(s)", linter)


@contract("preflight.no_stale_entrypoints")
@each("deployment_file", deployment_file_cases)
def test_no_stale_entrypoints(deployment_file, linter, vllm_evidence):
    _fail_on(_findings(linter, deployment_file, "entrypoint", vllm_evidence), "module(s)", linter)
