"""Measure one release under one flag set: start its server, run every suite, capture its profile."""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from atlas.plan import FlagSet, profile_of
from fixtures.verdicts import ContractRun, contract_runs
from pytest_vllm_conformance.connection.launcher import LaunchError, VllmServer
from pytest_vllm_conformance.connection.secrets import Secret

REPO = Path(__file__).resolve().parents[1]
# Where a failure's text says where it happened: the first line that is not a traceback frame.
_EXCEPTION_NAME = re.compile(r"^[\w.]*(Error|Exception|Timeout|Failed): ")
# A repr'd string: its opening quote follows no letter, so the apostrophes of prose ("the loop's") open none.
_GENERATED = re.compile(r"(?<![\w'])'[^']{40,}'(?![\w'])")
_NOISE_PREFIXES = ("Traceback", "File ", "  ", "assert ", "E ", "AssertionError")


def plugin_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def plugin_tree_dirty() -> bool | None:
    """Whether the plugin's checkout held changes beyond ``plugin_commit`` when it measured (None: not a git
    checkout): a record of a dirty tree was not measured by that commit's suites alone."""
    out = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True)
    return bool(out.stdout.strip()) if out.returncode == 0 else None


def one_line(text: str, limit: int = 220) -> str:
    """The reason in one line: pytest's first ``E`` line (the exception's message), else the first line
    that says something; generated text (a long quoted string) is elided, its wording is not a contract."""
    explained = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    if explained:
        line = _EXCEPTION_NAME.sub("", explained[0])
        line = _GENERATED.sub("'…'", line)
        return line if len(line) <= limit else line[: limit - 1] + "…"
    for line in text.splitlines():
        line = line.strip().removeprefix("Failed: ").removeprefix("E ").strip()
        if line and not line.startswith(_NOISE_PREFIXES):
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def outcome_of(runs: list[ContractRun]) -> dict:
    """One contract's outcome over its cases: failed beats undecided beats a known departure beats passed; not
    claimed as the harness said."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.verdict] = counts.get(run.verdict, 0) + 1
    failed = [run for run in runs if run.verdict == "failed"]
    if failed:
        first = failed[0]
        reason = one_line(first.message)
        return {"outcome": "failed", "reason": f"{first.case}: {reason}" if first.case else reason, "cases": counts}
    claim_reason = next((run.properties.get("vllm_claim_reason", "") for run in runs), "")
    if all(run.verdict == "not claimed" for run in runs):
        available = "applies to vLLM" not in claim_reason
        return {"outcome": "not claimed" if available else "not available", "reason": claim_reason, "cases": counts}
    # The harness reports undecided as its own verdict; a plain skip (a check that could not run) reads alike.
    skipped = [run for run in runs if run.verdict in ("undecided", "skipped")]
    if skipped and not [run for run in runs if run.verdict in ("passed", "known departure")]:
        return {"outcome": "undecided", "reason": one_line(skipped[0].message), "cases": counts}
    departed = [run for run in runs if run.verdict == "known departure"]
    if departed:
        reason = one_line(departed[0].message.removeprefix("known departure: "))
        return {"outcome": "known departure", "reason": reason, "cases": counts}
    return {"outcome": "passed", "reason": "", "cases": counts}


def measure(release: str, flags: FlagSet, python: str, models: dict[str, Path], work: Path) -> dict:
    """The record of one release under one flag set; a server that will not start is recorded as such."""
    started = time.monotonic()
    record: dict = {
        "release": release,
        "flag_set": flags.name,
        "plugin_commit": plugin_commit(),
        "plugin_tree_dirty": plugin_tree_dirty(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": flags.model,
        "model_config": model_config(models[flags.model]),
    }
    key = Secret("sk-atlas-" + secrets.token_hex(8)) if flags.api_key else None
    if flags.managed:
        record.update(_run_managed(flags, key, python, models[flags.model], work))
        record["seconds"] = round(time.monotonic() - started)
        record["load_average"] = round(os.getloadavg()[0], 1)
        return record
    env = dict(flags.env) or None
    if flags.scripted:  # imported only here: it imports vLLM
        from fixtures import scripted_output

        env = {**(env or {}), **scripted_output.server_env(models[flags.model])}
    server = VllmServer(
        models[flags.model],
        server_args(flags, models),
        python=python,
        api_key=key,
        env=env,
        log_path=work / "vllm-serve.log",
    )
    try:
        server.start()
    except LaunchError:
        # pydantic's "For further information visit https://errors.pydantic.dev/..." closes a refusal: skip it.
        tail = [line for line in server.log_tail(60).splitlines() if "rror" in line and "errors.pydantic" not in line]
        record.update(status="server refused the flags", reason=one_line(tail[-1] if tail else server.log_tail(3)))
        record["seconds"] = round(time.monotonic() - started)
        return record
    try:
        record.update(_run_suites(server, flags, key, work))
    finally:
        server.stop()
    record["seconds"] = round(time.monotonic() - started)
    # Timing checks (validation errors answered within 10 s) read the machine's load: the record says it.
    record["load_average"] = round(os.getloadavg()[0], 1)
    return record


def server_args(flags: FlagSet, models: dict[str, Path]) -> tuple[str, ...]:
    """The flag set's arguments, with its LoRA adapter's built path where it serves one."""
    if not flags.lora_adapter:
        return flags.args
    from fixtures.server_specs import LORA_ADAPTER_NAME

    return (*flags.args, "--lora-modules", f"{LORA_ADAPTER_NAME}={models[flags.lora_adapter]}")


def _run_suites(server: VllmServer, flags: FlagSet, key: Secret | None, work: Path) -> dict:
    return _pytest(flags, key, work, [f"--vllm-url={server.url}{flags.url_path}"])


def _run_managed(flags: FlagSet, key: Secret | None, python: str, model: Path, work: Path) -> dict:
    """The suites with the plugin starting the server (``--vllm-serve`` on the release's Python), for what is
    claimed only where the run owns the process; a start that failed is recorded as the atlas's own would be."""
    log = work / "vllm-serve.log"
    target = [
        f"--vllm-serve={model}", f"--vllm-serve-python={python}", f"--vllm-serve-log={log}",
        *(f"--vllm-serve-arg={arg}" for arg in flags.args),
    ]  # fmt: skip
    run = _pytest(flags, key, work, target)
    if not run["contracts"]:
        tail = log.read_text(errors="replace").splitlines()[-60:] if log.exists() else []
        errors = [line for line in tail if "rror" in line and "errors.pydantic" not in line]
        reason = one_line(errors[-1] if errors else "\n".join(tail[-3:]))
        return {"status": "server refused the flags", "reason": reason}
    return run


def _pytest(flags: FlagSet, key: Secret | None, work: Path, target: list[str]) -> dict:
    profile, junit, capture = work / "profile.yaml", work / "junit.xml", work / "capture.yaml"
    profile.write_text(yaml.safe_dump(profile_of(flags), sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    if key is not None:
        env["VLLM_API_KEY"] = key.reveal()  # through the environment, never argv
    argv = [
        sys.executable, "-m", "pytest", str(REPO / "suites"), *target,
        f"--vllm-profile={profile}", f"--junitxml={junit}", f"--vllm-capture-profile={capture}",
        "-p", "no:cacheprovider", "-q", "--no-header", "-o", "addopts=",
        *(["-m", flags.suites] if flags.suites else []),
    ]  # fmt: skip
    subprocess.run(argv, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=3600)
    return read_run(junit, capture)


def read_run(junit: Path, capture: Path) -> dict:
    """A suite run's outcomes by contract, and its capture, from its JUnit file and captured profile."""
    by_contract: dict[str, list[ContractRun]] = {}
    for run in contract_runs(junit):
        by_contract.setdefault(run.contract, []).append(run)
    version = next((r.properties.get("vllm_version") for runs in by_contract.values() for r in runs), None)
    captured = yaml.safe_load(capture.read_text()) if capture.exists() else {}
    return {
        "status": "measured",
        "vllm_version": version,
        "contracts": {contract: outcome_of(runs) for contract, runs in sorted(by_contract.items())},
        "capture": _capture_summary(captured or {}),
    }


def _capture_summary(captured: dict) -> dict:
    """The capture without what differs on every run (dates, URLs, ports) or names this machine (paths)."""
    observed = dict(captured.get("observed") or {})
    for volatile in ("captured_at", "url", "plugin_version", "capture_seconds", "start_clocks"):
        observed.pop(volatile, None)
    if isinstance(observed.get("rendering"), dict):
        observed["rendering"] = without_token_texts(observed["rendering"])
    summary = {
        "observed": observed,
        "context": captured.get("context") or {},
        "endpoint": captured.get("endpoint") or {},
    }
    return without_paths(summary)


def without_token_texts(rendering: dict) -> dict:
    """The rendering corpus's token ids without their texts: the ids say whether a rendering changed, and the
    texts, kept for every conversation of every record, were most of atlas.json."""
    conversations = rendering.get("conversations")
    if not isinstance(conversations, dict):
        return rendering
    kept = {
        name: {key: value for key, value in case.items() if key != "tokens"} if isinstance(case, dict) else case
        for name, case in conversations.items()
    }
    return {**rendering, "conversations": kept}


def without_paths(value: Any) -> Any:
    """Every absolute path in a capture (a model's root) cut to its last part, the same on every machine."""
    if isinstance(value, dict):
        return {key: without_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_paths(item) for item in value]
    if isinstance(value, str) and value.startswith("/") and "/" in value[1:] and " " not in value:
        return Path(value).name
    return value


def model_config(model_dir: Path) -> dict:
    """What the catalogue's length facts are computed from: the checkpoint's positions and rope scaling."""
    config = json.loads((model_dir / "config.json").read_text())
    return {key: config.get(key) for key in ("max_position_embeddings", "rope_scaling")}


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="atlas-"))
