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
from pytest_vllm_conformance.features.preflight.lint import deployment_file_cases, describe_all


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
def test_file_parses(deployment_file, vllm_preflight, vllm_evidence):
    lint = vllm_preflight.lint(deployment_file)
    if lint.problem:
        pytest.fail(lint.problem, pytrace=False)
    if lint.unchecked:
        pytest.skip(f"could not check: {lint.unchecked}")
    vllm_evidence.judged(1, "deployment files")


@contract("preflight.no_stale_env_vars")
@each("deployment_file", deployment_file_cases)
def test_no_stale_env_vars(deployment_file, vllm_preflight, vllm_evidence):
    _fail_on(
        _findings(vllm_preflight, deployment_file, "env", vllm_evidence), "environment variable(s)", vllm_preflight
    )


@contract("preflight.no_stale_flags")
@each("deployment_file", deployment_file_cases)
def test_no_stale_flags(deployment_file, vllm_preflight, vllm_evidence):
    _fail_on(_findings(vllm_preflight, deployment_file, "flag", vllm_evidence), "flag(s)", vllm_preflight)


@contract("preflight.no_stale_entrypoints")
@each("deployment_file", deployment_file_cases)
def test_no_stale_entrypoints(deployment_file, vllm_preflight, vllm_evidence):
    _fail_on(_findings(vllm_preflight, deployment_file, "entrypoint", vllm_evidence), "module(s)", vllm_preflight)
