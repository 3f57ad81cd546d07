"""A fleet's run time by replicas and xdist workers.

Runs the suites (``--markers``, default a cheap set) against fleets of 1, 2
and 3 replicas, serially and with 2 pytest-xdist workers (``-n 2``, which a
fleet turns into ``--dist loadgroup``: each replica's tests on one worker),
and prints the wall time of each run (median of ``--rounds``). Replicas are
the ``--url``s given, in turn (``--url A --url B``: a 3-replica fleet is A,
B, A again under another name); without ``--url`` one tiny real server is
started (``--model DIR``), every replica then being that server under
another name. With one server the replicas share its CPU: the figures show
the plugin's own parallelism, bounded by the server's and the machine's.

    python -m bench.fleet_parallel [--url URL ...] [--model DIR] [--markers EXPR] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MARKERS = "discovery or context or sdk or metrics"


def fleet_file(directory: Path, urls: list[str], replicas: int) -> Path:
    path = directory / f"fleet-{replicas}.yaml"
    entries = [{"name": f"replica-{index}", "url": urls[index % len(urls)]} for index in range(replicas)]
    path.write_text(yaml.safe_dump({"replicas": entries}))
    return path


def run_once(fleet: Path, workers: int, markers: str) -> tuple[float, int]:
    argv = [sys.executable, "-m", "pytest", str(ROOT / "suites"), "-q", "-p", "no:cacheprovider", "-m", markers]
    argv += [f"--vllm-fleet={fleet}"] if fleet.name != "fleet-1.yaml" else [f"--vllm-url={_first_url(fleet)}"]
    if workers > 1:
        argv += ["-n", str(workers)]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    return time.monotonic() - started, done.returncode


def _first_url(fleet: Path) -> str:
    return yaml.safe_load(fleet.read_text())["replicas"][0]["url"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", action="append", default=[])
    parser.add_argument("--model", type=Path, help="a tiny model directory to serve when no --url is given")
    parser.add_argument("--markers", default=DEFAULT_MARKERS)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    server = None
    urls = list(args.url)
    if not urls:
        if args.model is None:
            parser.error("give --url (a running server) or --model DIR (a model to serve)")
        from pytest_vllm_conformance.connection.launcher import VllmServer

        server = VllmServer(args.model, ("--dtype", "float32", "--enforce-eager", "--max-model-len", "512")).start()
        urls = [server.url]
    try:
        with tempfile.TemporaryDirectory(prefix="fleet-bench-") as scratch:
            print(f"markers: {args.markers}; servers: {len(urls)}; rounds: {args.rounds}")
            print(f"{'replicas':>8}  {'workers':>7}  {'seconds':>8}  exit")
            for replicas in (1, 2, 3):
                fleet = fleet_file(Path(scratch), urls, replicas)
                for workers in (1, 2):
                    timed = [run_once(fleet, workers, args.markers) for _ in range(args.rounds)]
                    seconds = statistics.median(seconds for seconds, _ in timed)
                    codes = ",".join(str(code) for _, code in timed)
                    print(f"{replicas:>8}  {workers:>7}  {seconds:>8.1f}  {codes}", flush=True)
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
