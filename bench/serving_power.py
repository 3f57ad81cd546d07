"""The serving gate's power and false alarms at its defaults, on real servers made slower the way hardware is.

Starts two identical tiny-llama servers (our tests' thread settings, ``SHARED_MACHINE_ENV``, unless
``--vllm-defaults``) and holds each in a cpu cgroup (``fixtures/cpu_share.py``): the baseline at one whole
core, the target at ``--shares`` of it in turn (1.0 is the false-alarm run; 0.9, 0.8 and 0.6 a loss of about
10, 20 and 40 %). For each share it runs ``pytest suites -m serving`` ``--runs`` times as a user would, the
profile declaring ``concurrency: 8`` and nothing else, and reads ``serving.throughput_not_worse`` and
``serving.latency_not_worse`` by contract id from the JUnit file: how often each failed, passed and was
undecided, the round pairs and seconds of load each run took, and the throughput ratio measured (the loss the
share really made). Needs root and a cpu cgroup controller; by default the bench's own processes run with a
high CPU weight, so other work on the machine disturbs them less (``--no-priority`` to measure without).

    python -m bench.serving_power [--runs N] [--shares 1.0,0.9,0.8,0.6] [--vllm-defaults] [--no-priority]
                                  [--python PYTHON_WITH_VLLM] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fixtures import cpu_share, tiny_models
from fixtures.server_specs import CPU_SERVE_ARGS, SHARED_MACHINE_ENV
from fixtures.verdicts import contract_runs
from pytest_vllm_conformance.connection.launcher import VllmServer

REPO = Path(__file__).resolve().parents[1]
PROFILE = "profile: 1\nname: serving-power\nserving: {concurrency: 8}\n"
JUDGED = ("serving.throughput_not_worse", "serving.latency_not_worse")


def gate(target: str, baseline: str, workdir: Path, name: str) -> dict[str, dict[str, str]]:
    """One suite run: each judged contract's verdict and recorded properties."""
    junit = workdir / f"{name}.xml"
    command = [sys.executable, "-m", "pytest", str(REPO / "suites"), "-m", "serving", "-k", "not_worse"]
    command += [f"--vllm-url={target}", f"--vllm-baseline-url={baseline}", f"--vllm-profile={workdir / 'profile.yaml'}"]
    command += [f"--junitxml={junit}", "-p", "no:cacheprovider", "-q"]
    subprocess.run(command, cwd=REPO, capture_output=True, check=False)
    return {r.contract: {"verdict": r.verdict, **r.properties} for r in contract_runs(junit) if r.contract in JUDGED}


def summary(runs: list[dict[str, dict[str, str]]], contract: str) -> str:
    verdicts = [run.get(contract, {}).get("verdict", "missing") for run in runs]
    counts = ", ".join(
        f"{v} {verdicts.count(v)}" for v in ("failed", "passed", "undecided", "missing") if v in verdicts
    )
    return f"{contract.split('.')[1]}: {counts}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--shares", default="1.0,0.9,0.8,0.6", help="the target's CPU shares, the baseline's 1.0")
    parser.add_argument("--vllm-defaults", action="store_true", help="vLLM's CPU thread settings instead of ours")
    parser.add_argument("--no-priority", action="store_true", help="no high CPU weight for the bench's processes")
    parser.add_argument("--python", help="interpreter with vLLM (default: this one)")
    parser.add_argument("--keep", type=Path, help="keep every run's JUnit file in DIR")
    args = parser.parse_args()
    why = cpu_share.available()
    if why:
        sys.exit(f"bench.serving_power: {why}")
    env = None if args.vllm_defaults else SHARED_MACHINE_ENV
    model = str(tiny_models.build("tiny-llama"))
    with (
        tempfile.TemporaryDirectory() as tmp,
        VllmServer(model, CPU_SERVE_ARGS, python=args.python, env=env) as target,
        VllmServer(model, (*CPU_SERVE_ARGS, "--seed", "0"), python=args.python, env=env) as baseline,
    ):
        assert target.url and baseline.url and target.process and baseline.process, "both servers started"
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "profile.yaml").write_text(PROFILE)
        weight = 1024 if args.no_priority else 262144
        with cpu_share.measured_apart([(target.process.pid, 1.0), (baseline.process.pid, 1.0)], weight) as (held, _):
            settings = "vLLM's CPU defaults" if args.vllm_defaults else "our tests' thread settings"
            print(f"{settings}; {args.runs} runs a share; the profile declares concurrency 8 only", flush=True)
            for share in (float(s) for s in args.shares.split(",")):
                held.set(share)
                started = time.monotonic()
                runs = [gate(target.url, baseline.url, workdir, f"share{share}-{i}") for i in range(args.runs)]
                report(share, runs, time.monotonic() - started)


def report(share: float, runs: list[dict[str, dict[str, str]]], seconds: float) -> None:
    throughput = [run.get(JUDGED[0], {}) for run in runs]
    pairs = [int(t["vllm_serving_round_pairs"]) for t in throughput if "vllm_serving_round_pairs" in t]
    load = [float(t["vllm_serving_load_seconds"]) for t in throughput if "vllm_serving_load_seconds" in t]
    ratios = [float(t["vllm_serving_throughput_ratio"]) for t in throughput if "vllm_serving_throughput_ratio" in t]
    measured = math.exp(statistics.fmean(math.log(r) for r in ratios)) if ratios else float("nan")
    print(
        f"target at {share:.0%} of a core: {len(runs)} runs in {seconds:.0f} s; measured ratio {measured:.3f} "
        f"(a {1 - measured:.0%} loss); {summary(runs, JUDGED[0])}; {summary(runs, JUDGED[1])}; round pairs "
        f"median {statistics.median(pairs) if pairs else 0:g}, max {max(pairs, default=0)}; load on the target "
        f"median {statistics.median(load) if load else 0:.1f} s, max {max(load, default=0):.1f} s",
        flush=True,
    )


if __name__ == "__main__":
    main()
