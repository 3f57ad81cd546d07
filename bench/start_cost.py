"""What one of our test servers costs in CPU, with vLLM's CPU defaults and with the settings our tests use.

Our server tests are bound by the CPU of a 2-core machine (docs/testing.md), so a server's CPU seconds, not
its wall time, decide how long CI takes. For each setting this starts one real tiny-llama server, sums the
CPU time of its whole process tree until ``/health`` answers, then sends ``--requests`` short completions
one after another (32 tokens each, ``ignore_eos``) and sums the CPU the server spent on them.

- ``default``: vLLM's CPU defaults (what a user's server and the plugin's embedded one run);
- ``tests``: fixtures/server_specs.py's SHARED_MACHINE_ENV (unbound compute thread, the worker inside the engine-core
  process).

    python -m bench.start_cost [--requests 60] [--rounds 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import httpx
import psutil

from fixtures import tiny_models
from fixtures.server_specs import CPU_SERVE_ARGS, SHARED_MACHINE_ENV
from pytest_vllm_conformance.connection.launcher import VllmServer

REPO = Path(__file__).resolve().parents[1]

SETTINGS: dict[str, dict[str, str]] = {"default": {}, "tests": SHARED_MACHINE_ENV}


def tree_cpu_seconds(root: psutil.Process) -> tuple[float, int]:
    """CPU seconds of a process and its descendants, and how many there are."""
    total, count = 0.0, 0
    for process in (root, *root.children(recursive=True)):
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
        count += 1
    return total, count


def measure(model: Path, env: dict[str, str], requests: int) -> dict[str, float]:
    began = time.monotonic()
    with VllmServer(model, CPU_SERVE_ARGS, env=env) as server:
        ready = time.monotonic() - began
        assert server.process is not None and server.url is not None
        root = psutil.Process(server.process.pid)
        start_cpu, processes = tree_cpu_seconds(root)
        body = {"model": server.served_model, "prompt": "hello there " * 20, "max_tokens": 32, "ignore_eos": True}
        began = time.monotonic()
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for _ in range(requests):
                client.post("/v1/completions", json=body).raise_for_status()
        served = time.monotonic() - began
        serve_cpu = tree_cpu_seconds(root)[0] - start_cpu
    return {
        "ready_s": ready,
        "start_cpu_s": start_cpu,
        "processes": processes,
        "serve_s": served,
        "serve_cpu_s": serve_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=1, help="settings measured in interleaved rounds")
    args = parser.parse_args()
    model = tiny_models.build("tiny-llama")
    print(f"{'setting':8} {'ready s':>8} {'start CPU s':>12} {'processes':>10} {'serve s':>8} {'serve CPU s':>12}")
    for _ in range(args.rounds):
        for name, env in SETTINGS.items():
            row = measure(model, env, args.requests)
            print(
                f"{name:8} {row['ready_s']:8.1f} {row['start_cpu_s']:12.1f} {row['processes']:10.0f} "
                f"{row['serve_s']:8.1f} {row['serve_cpu_s']:12.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
