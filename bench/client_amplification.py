"""Memory and time of a client facing an amplified answer (a 300 MB body).

vLLM 0.29 answered a 4 KB malformed request with 91 MB; a gate must survive
such a server. Each client runs in a fresh interpreter (so peak RSS is its
own), against fixtures/hostile_server/ in another process:

- the plugin's BoundedClient with its default 1 MiB cap;
- the OpenAI SDK (as an application would call it), for comparison;
- the OpenAI SDK given the plugin's CappedTransport, as the vllm_openai fixture builds it.

Prints one line per client: wall seconds, peak RSS (MiB), bytes kept.
Targets (issue: the suite's client under 150 MB and 3 s).

    python -m bench.client_amplification [--bytes 300000000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CLIENTS = {
    "BoundedClient (1 MiB cap)": """
from pytest_vllm_conformance.connection.client import BoundedClient
with BoundedClient(URL, timeout=60) as client:
    response = client.get(PATH)
kept = len(response.body)
""",
    "openai SDK (default httpx)": """
import openai
sdk = openai.OpenAI(base_url=URL, api_key="none", max_retries=0, timeout=60)
response = sdk.get(PATH, cast_to=openai._legacy_response.HttpxBinaryResponseContent)
kept = len(response.content)
""",
    "openai SDK + CappedTransport": """
import httpx, openai
from pytest_vllm_conformance.connection.transport import CappedTransport
sdk = openai.OpenAI(base_url=URL, api_key="none", max_retries=0, timeout=60,
                    http_client=httpx.Client(transport=CappedTransport(1024 * 1024)))
try:
    sdk.get(PATH, cast_to=openai._legacy_response.HttpxBinaryResponseContent)
    kept = -1
except openai.APIConnectionError:
    kept = 0
""",
}

HARNESS = """
import json, resource, sys, time
URL, PATH = sys.argv[1], sys.argv[2]
started = time.perf_counter()
{body}
elapsed = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"seconds": elapsed, "peak_mib": peak, "kept": kept}}))
"""


def start_hostile_server() -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "fixtures.hostile_server", "--port", "0"], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None  # stdout=PIPE
    port = process.stdout.readline().split()[1]
    return process, f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=int, default=300_000_000)
    args = parser.parse_args()
    server, url = start_hostile_server()
    try:
        print(f"server answers {args.bytes:,} bytes; python {sys.version.split()[0]}")
        for name, body in CLIENTS.items():
            code = HARNESS.format(body=body)
            run = subprocess.run(
                [sys.executable, "-c", code, url, f"/huge?bytes={args.bytes}"],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if run.returncode != 0:
                print(f"{name:32s} failed: {run.stderr.strip().splitlines()[-1]}")
                continue
            figures = json.loads(run.stdout.strip().splitlines()[-1])
            print(
                f"{name:32s} {figures['seconds']:7.2f} s  {figures['peak_mib']:7.1f} MiB peak RSS  "
                f"kept {figures['kept']:,} B"
            )
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
