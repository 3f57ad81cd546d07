"""The quality suite's eval path vs lm-eval's own CLI, on the same task and server.

    python -m bench.eval_path [--url URL | --serve MODEL_DIR] [--task multiple_choice] [--repeats 3]

Each side runs in a fresh Python process, as it would in CI: ours calls what
the suite calls (``runner.language_model`` + ``runner.evaluate``, i.e.
``lm_eval.simple_evaluate`` on ``local-completions``), the other is
``lm_eval run --model local-completions ... --log_samples`` (per-item results
are what the gate needs, so the CLI writes them too). Both use the server's
tokenizer through lm-eval's ``remote`` backend, offline. Prints the median
wall time of each, the ratio ours / CLI (target <= 1.05) and whether the
per-item results agree.

Without ``--url`` a tiny-llama server is started (with
``--enable-tokenizer-info-endpoint``, which the CLI's remote tokenizer needs)
and stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.connection.discovery import discover
from suites.quality import task_files
from suites.quality.offline import OFFLINE_ENV
from suites.quality.runner import EVAL_CONCURRENCY

REPO = Path(__file__).resolve().parents[1]

TASKS = {"short_answer": task_files.SHORT_ANSWER, "multiple_choice": task_files.MULTIPLE_CHOICE}
CPU_SERVE_ARGS = ("--dtype", "float32", "--enforce-eager", "--max-model-len", "512", "--enable-tokenizer-info-endpoint")

OUR_PATH = """
import json, sys
from pathlib import Path
from pytest_vllm_conformance.connection.client import BoundedClient
from suites.quality.runner import Endpoint, evaluate, language_model, task_manager
url, model, max_model_len, task, include, out = sys.argv[1:7]
client = BoundedClient(url)
endpoint = Endpoint("target", url, model, max_model_len=int(max_model_len))
lm = language_model(endpoint, "completions", client, max_length=int(max_model_len) + 1)
result = evaluate(lm, [task], task_manager([Path(include)], [task]), backend="completions")[task]
Path(out).write_text(json.dumps({name: metric.items for name, metric in result.metrics.items()}))
client.close()
"""


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    completed = subprocess.run(command, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    elapsed = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"failed ({completed.returncode}): {' '.join(command)}\n{completed.stderr[-3000:]}")
    return elapsed


def cli_items(output_dir: Path, task: str) -> dict[str, dict[str, float]]:
    """Per-item values from the CLI's samples file, in our runner's shape."""
    samples = sorted(output_dir.rglob(f"samples_{task}_*.jsonl"))[-1]
    items: dict[str, dict[str, float]] = {}
    for line in samples.read_text().splitlines():
        sample = json.loads(line)
        for metric in sample["metrics"]:
            items.setdefault(f"{metric},{sample['filter']}", {})[str(sample["doc_id"])] = float(sample[metric])
    return items


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running vLLM server with /tokenizer_info (default: start tiny-llama)")
    parser.add_argument("--serve", type=Path, help="model directory to serve (default: the tiny-llama fixture)")
    parser.add_argument("--task", choices=sorted(TASKS), default="multiple_choice")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    server = None
    url = args.url
    if url is None:
        from pytest_vllm_conformance.connection.launcher import VllmServer

        model_dir = args.serve
        if model_dir is None:
            from fixtures import tiny_models

            model_dir = tiny_models.build("tiny-llama")
        server = VllmServer(model_dir, CPU_SERVE_ARGS).start()
        url = server.url
        print(f"started vllm serve {model_dir} at {url} in {server.ready_seconds:.0f} s")
    try:
        with BoundedClient(url) as client:
            facts = discover(client)
            if facts.max_model_len is None:
                raise SystemExit(f"{url} does not say its max_model_len on /v1/models")
            if client.get("/tokenizer_info").status != 200:
                raise SystemExit(
                    f"{url} does not serve /tokenizer_info: start it with --enable-tokenizer-info-endpoint"
                )
        task = TASKS[args.task]
        work = Path(tempfile.mkdtemp(prefix="eval-path-bench-"))
        # The 40 hand-written items: the figures in docs/benchmarks.md were measured on those.
        include = task_files.write_shipped(work / "tasks", task_files.HAND_WRITTEN_ITEMS)
        env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": str(REPO)}
        ours_out = work / "ours.json"
        ours_cmd = [
            sys.executable,
            "-c",
            OUR_PATH,
            url,
            facts.model,
            str(facts.max_model_len),
            task,
            str(include),
            str(ours_out),
        ]
        model_args = (
            f"base_url={url}/v1/completions,model={facts.model},tokenizer_backend=remote,"
            f"num_concurrent={EVAL_CONCURRENCY},max_length={facts.max_model_len + 1},seed=1234"
        )
        ours, cli = [], []
        for repeat in range(args.repeats):
            cli_out = work / f"cli-{repeat}"
            cli_cmd = [
                str(Path(sys.executable).with_name("lm_eval")),
                "run",
                "--model",
                "local-completions",
                "--model_args",
                model_args,
                "--tasks",
                task,
                "--include_path",
                str(include),
                "--batch_size",
                "1",
                "--log_samples",
                "--output_path",
                str(cli_out),
            ]
            # Alternate the order so that neither side always runs on a warmer server.
            first, second = (ours_cmd, cli_cmd) if repeat % 2 == 0 else (cli_cmd, ours_cmd)
            times = {id(first): timed(first, env), id(second): timed(second, env)}
            ours.append(times[id(ours_cmd)])
            cli.append(times[id(cli_cmd)])
        same = json.loads(ours_out.read_text()) == cli_items(cli_out, task)
    finally:
        if server is not None:
            server.stop()
    ours_median, cli_median = statistics.median(ours), statistics.median(cli)
    print(f"task {task} on {url} ({facts.model}), {args.repeats} runs each, fresh process per run")
    print(
        f"suite eval path (runner -> lm_eval.simple_evaluate): median {ours_median:.2f} s  "
        f"{[round(t, 2) for t in ours]}"
    )
    print(
        f"lm_eval run --model local-completions (CLI):         median {cli_median:.2f} s  {[round(t, 2) for t in cli]}"
    )
    print(f"ratio suite / CLI: {ours_median / cli_median:.3f} (target <= 1.05)")
    print(f"same per-item results: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
