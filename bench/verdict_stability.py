"""Verdicts without noise: the admission suite run N times, and all suites serial against -n 2.

A gate that fails a conformant server now and then gets switched off. This
script starts one real vLLM server with a queue bound (``--max-num-queued-reqs
2``, tiny model), declares that bound in the profile, and then:

1. runs ``pytest suites -m admission`` ``--admission-runs`` times (default 20)
   and prints how many runs failed (target: 0), optionally while ``--cpu-load N``
   other processes spin on the CPUs (the false-failure check of issue 25:
   ``--admission-runs 50 --cpu-load 2 --agreement-runs 0``);
2. runs every suite ``--agreement-runs`` times (default 10) with ``-n 2`` and
   compares each run's verdict per contract id with a serial run's (target:
   every run agrees). Under -n 2 the admission burst holds the server alone
   (pytest_vllm_conformance/connection/run_lock.py) while the other worker waits.

Verdicts are read from each run's JUnit file by contract id, as our tests do.

    python -m bench.verdict_stability [--python PYTHON_WITH_VLLM] [--admission-runs N] [--agreement-runs N]
                                      [--cpu-load N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fixtures import tiny_models
from fixtures.verdicts import contract_runs
from pytest_vllm_conformance.connection.launcher import VllmServer

REPO = Path(__file__).resolve().parents[1]

BOUND = 2
# 2048 tokens of context: the requests holding the bound stream that many, outlasting the burst on a busy box.
SERVE_ARGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "2048", "--max-num-queued-reqs", str(BOUND))
PROFILE = f"""
profile: 1
name: bounded
endpoint: {{scale_out: disabled, auth: none, prompt_embeds: disabled, prompt_embeds_hidden_size: 128}}
context: {{max_model_len: 2048}}
admission: {{max_queued_requests: {BOUND}}}
"""


def run(url: str, workdir: Path, name: str, *args: str) -> dict[str, tuple[str, str]]:
    """One pytest run of the suites; contract[case] -> (verdict, message)."""
    junit = workdir / f"{name}.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(REPO / "suites"),
            f"--vllm-url={url}",
            f"--vllm-profile={workdir / 'profile.yaml'}",
            f"--junitxml={junit}",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
            *args,
        ],
        cwd=workdir,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return {r.key: (r.verdict, _why(r.message)) for r in contract_runs(junit)}


def _why(message: str) -> str:
    """A failure's own words (its ``E`` lines), else the skip reason, in one line."""
    said = [line[1:].strip() for line in message.splitlines() if line.startswith("E ")]
    return " ".join(" ".join(said or [message]).split())[:300]


# A process that keeps one CPU busy until it is stopped.
SPIN = "while True:\n    pass\n"


def cpu_load(processes: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(processes)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", help="interpreter with vLLM (default: this one)")
    parser.add_argument("--admission-runs", type=int, default=20)
    parser.add_argument("--agreement-runs", type=int, default=10)
    parser.add_argument(
        "--cpu-load", type=int, default=0, help="processes spinning on the CPUs during the admission runs"
    )
    args = parser.parse_args()
    model = tiny_models.build("tiny-llama")
    with tempfile.TemporaryDirectory() as tmp, VllmServer(model, SERVE_ARGS, python=args.python) as server:
        assert server.url, "a server that started has its URL"
        workdir, url = Path(tmp), server.url
        (workdir / "profile.yaml").write_text(PROFILE)
        print(f"server: tiny-llama, --max-num-queued-reqs {BOUND}, ready in {server.ready_seconds:.1f} s")

        failed_runs, false_failures, remeasured = [], 0, 0
        started = time.perf_counter()
        spinning = cpu_load(args.cpu_load)
        try:
            for index in range(args.admission_runs):
                verdicts = run(url, workdir, f"admission-{index}", "-m", "admission")
                bad = sorted(
                    f"{key}: {verdict} ({message})"
                    for key, (verdict, message) in verdicts.items()
                    if verdict != "passed"
                )
                false_failures += any(verdict == "failed" for verdict, _ in verdicts.values())
                remeasured += "measured again" in (workdir / f"admission-{index}.xml").read_text()
                if bad or not verdicts:
                    failed_runs.append((index, bad or ["no admission test ran"]))
        finally:
            for process in spinning:
                process.kill()
        load = f", {args.cpu_load} process(es) spinning on the {os.cpu_count()} CPUs" if args.cpu_load else ""
        print(
            f"admission suite{load}: {args.admission_runs - len(failed_runs)} of {args.admission_runs} runs all "
            f"passed, {len(failed_runs)} with a failure or skip, {false_failures} false failure(s); "
            f"{remeasured} run(s) measured a single over-admission again ({time.perf_counter() - started:.0f} s)"
        )
        for index, bad in failed_runs:
            print(f"  run {index}:")
            for line in bad:
                print(f"    {line}")

        serial = run(url, workdir, "serial")
        serial_verdicts = [verdict for verdict, _ in serial.values()]
        print(
            f"all suites serial: {len(serial)} tests, {serial_verdicts.count('passed')} passed, "
            f"{serial_verdicts.count('not claimed')} not claimed, {serial_verdicts.count('failed')} failed, "
            f"{serial_verdicts.count('skipped')} skipped"
        )
        for key, (verdict, message) in sorted(serial.items()):
            if verdict in ("failed", "skipped"):
                print(f"  {key}: {verdict} ({message})")
        disagreeing = []
        for index in range(args.agreement_runs):
            spread = run(url, workdir, f"xdist-{index}", "-n", "2")
            differences = sorted(
                f"{key}: {serial.get(key, ('missing',))[0]} serially, {spread.get(key, ('missing', ''))} with -n 2"
                for key in set(serial) | set(spread)
                if serial.get(key, ("missing",))[0] != spread.get(key, ("missing",))[0]
            )
            if differences:
                disagreeing.append((index, differences))
        print(
            f"all suites with -n 2: {args.agreement_runs - len(disagreeing)} of {args.agreement_runs} runs agree "
            "with the serial run, contract by contract"
        )
        for index, differences in disagreeing:
            print(f"  run {index}: " + "; ".join(differences[:5]) + (" ..." if len(differences) > 5 else ""))


if __name__ == "__main__":
    main()
