"""Suite overhead against the request floor.

A gate that runs on every canary must cost little more than the requests it
has to send. This script starts one warm real vLLM server (tiny model,
scale-out, prompt embeds, an API key), then, in one run:

1. records every request the endpoint, context and discovery suites send,
   through a recording proxy (fixtures/fault_proxy.py);
2. times the same suites straight against the server (a fresh pytest
   process: interpreter, plugin, collection and reporting included);
3. times a bare httpx loop replaying the recorded requests in order.

It prints both wall times and their ratio (target: <= 1.3).

    python bench/suite_overhead.py [--python PYTHON_WITH_VLLM]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fixtures import tiny_models  # noqa: E402
from fixtures.fault_proxy import FaultProxy, RequestDraft, Rule  # noqa: E402
from pytest_vllm_conformance.launcher import VllmServer  # noqa: E402
from pytest_vllm_conformance.options import Secret  # noqa: E402

KEY = "sk-bench-overhead"
MARKERS = "discovery or scale_out or auth or validation_bounds or embedding_limits or context"
PROFILE = """
profile: 1
name: bench
endpoint:
  scale_out: enabled
  auth: required
  prompt_embeds: enabled
  public_routes: [/health, /ping, /version, /load, /metrics, /openapi.json, /docs, /docs/oauth2-redirect, /redoc,
                  /tokenize, /detokenize, /invocations, /generative_scoring, /scale_elastic_ep,
                  /is_scaling_elastic_ep, /kv_event_sources]
context: {max_model_len: 512}
"""
SERVE_ARGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "512", "--enable-scale-out",
              "--enable-prompt-embeds")


@dataclass(frozen=True)
class Recorded:
    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None


@dataclass(frozen=True, kw_only=True)
class Record(Rule):
    """Keeps a copy of every request and changes nothing."""

    log: list = None  # type: ignore[assignment]
    edits_request_body: ClassVar[bool] = True

    def apply_to_request(self, draft: RequestDraft) -> bool:
        headers = tuple((k, v) for k, v in draft.headers.items() if k.lower() not in ("host", "content-length"))
        self.log.append(Recorded(draft.method, draft.target.decode(), headers, draft.body))
        return False


def run_suites(url: str, workdir: Path) -> float:
    profile = workdir / "profile.yaml"
    profile.write_text(PROFILE)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", str(REPO / "suites"), "-m", MARKERS, f"--vllm-url={url}",
         f"--vllm-profile={profile}", "-q", "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function"],
        cwd=workdir,
        env={**__import__("os").environ, "VLLM_API_KEY": KEY},
        stdout=subprocess.DEVNULL,
        check=False,
    )
    return time.perf_counter() - started


def replay(url: str, requests: list[Recorded]) -> float:
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=60, trust_env=False) as client:
        for request in requests:
            client.request(request.method, request.target, headers=dict(request.headers), content=request.body).read()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", help="interpreter with vLLM (default: this one)")
    args = parser.parse_args()
    model = tiny_models.build("tiny-llama")
    with tempfile.TemporaryDirectory() as tmp, VllmServer(model, SERVE_ARGS, python=args.python,
                                                         api_key=Secret(KEY)) as server:
        workdir = Path(tmp)
        recorder = Record(log=[])
        with FaultProxy(server.url, rules=[recorder]) as proxy:
            run_suites(proxy.url, workdir)  # warms the server and records the requests
        suite_seconds = run_suites(server.url, workdir)
        replay_seconds = replay(server.url, recorder.log)
    print(f"server: tiny-llama on vLLM, ready in {server.ready_seconds:.1f} s; suites: {MARKERS}")
    print(f"requests recorded:   {len(recorder.log)}")
    print(f"suite wall time:     {suite_seconds:.2f} s (pytest process, collection and reports included)")
    print(f"bare httpx replay:   {replay_seconds:.2f} s")
    print(f"ratio suite/replay:  {suite_seconds / replay_seconds:.2f} (target <= 1.3)")


if __name__ == "__main__":
    main()
