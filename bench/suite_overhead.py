"""Suite overhead against the request floor.

A gate that runs on every canary must cost little more than the requests it
has to send. This script starts one warm real vLLM server (tiny model,
scale-out, prompt embeds, an API key), then:

1. records every request the endpoint, context, discovery and wire suites send,
   through a recording proxy (fixtures/fault_proxy/);
2. in each of ``--rounds`` rounds, times two commands against the server:
   the suites (a fresh pytest process: interpreter, plugin, collection,
   discovery and reporting included), then a bare httpx loop replaying the
   recorded requests in order (a fresh Python process too: interpreter and
   httpx import included, so start-up is charged to both sides);
3. prints the median of each, their ratio (target: <= 1.3), the replay's
   loop alone, and every round: the server's own time for one request varies
   by tenths of a second from run to run, so one round proves little.

Both commands cache bytecode (in a temporary PYTHONPYCACHEPREFIX, filled by
the recording run), as an installed plugin does from its second run on; a
machine that sets PYTHONDONTWRITEBYTECODE pays about 0.25 s more per suite run
to compile the plugin and the suites again.

    python -m bench.suite_overhead [--python PYTHON_WITH_VLLM] [--rounds N] [--markers EXPR]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from fixtures import tiny_models
from fixtures.fault_proxy import FaultProxy, RequestDraft, Rule
from pytest_vllm_conformance.connection.launcher import VllmServer
from pytest_vllm_conformance.connection.secrets import Secret

REPO = Path(__file__).resolve().parents[1]

KEY = "sk-bench-overhead"
MARKERS = "discovery or scale_out or auth or validation_bounds or embedding_limits or context or wire"
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
SERVE_ARGS = (
    "--dtype",
    "float32",
    "--enforce-eager",
    "--max-model-len",
    "512",
    "--enable-scale-out",
    "--enable-prompt-embeds",
)


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


# The floor: what sending the same requests costs with nothing around them.
BARE_REPLAY = """
import base64, json, sys, time
import httpx
requests = json.load(open(sys.argv[1]))
started = time.perf_counter()
with httpx.Client(base_url=sys.argv[2], timeout=60, trust_env=False) as client:
    for method, target, headers, body in requests:
        client.request(method, target, headers=headers, content=base64.b64decode(body)).read()
print(time.perf_counter() - started)
"""


def _command_env(workdir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env.update(VLLM_API_KEY=KEY, PYTHONPYCACHEPREFIX=str(workdir / "pycache"))
    return env


def run_suites(url: str, workdir: Path, markers: str) -> float:
    profile = workdir / "profile.yaml"
    profile.write_text(PROFILE)
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(REPO / "suites"),
            "-m",
            markers,
            f"--vllm-url={url}",
            f"--vllm-profile={profile}",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
        ],
        cwd=workdir,
        env=_command_env(workdir),
        stdout=subprocess.DEVNULL,
        check=False,
    )
    return time.perf_counter() - started


def save_requests(requests: list[Recorded], path: Path) -> None:
    rows = [(r.method, r.target, dict(r.headers), base64.b64encode(r.body or b"").decode()) for r in requests]
    path.write_text(json.dumps(rows))


def replay(url: str, requests_file: Path, workdir: Path) -> tuple[float, float]:
    """Wall time of the bare replay command, and of its loop alone."""
    started = time.perf_counter()
    finished = subprocess.run(
        [sys.executable, "-c", BARE_REPLAY, str(requests_file), url],
        cwd=workdir,
        env=_command_env(workdir),
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - started, float(finished.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", help="interpreter with vLLM (default: this one)")
    parser.add_argument("--rounds", type=int, default=5, help="suite + replay pairs to take medians over")
    parser.add_argument("--markers", default=MARKERS, help="the suites to time (a -m expression), to see one's share")
    args = parser.parse_args()
    model = tiny_models.build("tiny-llama")
    suite_times: list[float] = []
    replays: list[tuple[float, float]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        VllmServer(model, SERVE_ARGS, python=args.python, api_key=Secret(KEY)) as server,
    ):
        assert server.url, "a server that started has its URL"
        workdir, url = Path(tmp), server.url
        recorder = Record(log=[])
        with FaultProxy(url, rules=[recorder]) as proxy:
            run_suites(proxy.url, workdir, args.markers)  # warms the server and bytecode cache, records the requests
        requests_file = workdir / "requests.json"
        save_requests(recorder.log, requests_file)
        replay(url, requests_file, workdir)  # fills the bytecode cache of the replay's imports
        for _ in range(args.rounds):
            suite_times.append(run_suites(url, workdir, args.markers))
            replays.append(replay(url, requests_file, workdir))
    suite = statistics.median(suite_times)
    floor = statistics.median(wall for wall, _ in replays)
    loop = statistics.median(loop for _, loop in replays)
    print(f"server: tiny-llama on vLLM, ready in {server.ready_seconds:.1f} s; suites: {args.markers}")
    print(f"requests recorded:   {len(recorder.log)}")
    print(
        f"suite command:       {suite:.2f} s, median of {args.rounds} (pytest process: start-up, collection, reports)"
    )
    print(
        f"bare replay command: {floor:.2f} s, median of {args.rounds} (python + httpx import + loop); "
        f"the loop alone {loop:.2f} s"
    )
    print(f"ratio suite/replay:  {suite / floor:.2f} (target <= 1.3); suite/loop alone {suite / loop:.2f}")
    rounds = ", ".join(f"{s:.2f}/{r:.2f}" for s, (r, _) in zip(suite_times, replays, strict=True))
    print(f"rounds (suite/replay s): {rounds}")


if __name__ == "__main__":
    main()
