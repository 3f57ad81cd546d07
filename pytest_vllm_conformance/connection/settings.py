"""The run's settings as plain values: what to test, how to reach it, and what else the run was given.

Resolved once from the command line, the environment, the ini file and the
defaults by ``plugin/options.py`` (which also keeps where each value came
from, for the report header). Frozen and free of pytest, so every room can
read it; tests/unit/test_options.py keeps its fields in step with the
option table.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from packaging.version import Version

from pytest_vllm_conformance.connection.secrets import Secret

MIB = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    # the server under test, and how to reach it
    # One URL: the server under test; several: the replicas of a fleet (with those of the fleet file).
    url: tuple[str, ...] = ()
    fleet: Path | None = None
    fleet_expand_dns: bool = False
    ingress_url: str | None = None
    api_key: Secret | None = None
    ingress_api_key: Secret | None = None
    model: str | None = None
    timeout: float = 30.0
    max_body: int = MIB
    ca_bundle: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    trust_env: bool = False
    # the embedded server
    serve: Path | None = None
    serve_arg: tuple[str, ...] = ()
    serve_python: Path | None = None
    serve_timeout: float = 300.0
    serve_log: Path | None = None
    serve_second_start: bool = False
    # what it is expected to do, and what the run writes
    profile: Path | None = None
    gate: str = "report"
    report: Path | None = None
    # the shard set this run belongs to, for `vllm-conformance merge`: "I/N", or every replica's URL
    shard: str | None = None
    shard_replicas: tuple[str, ...] = ()
    shard_run: str | None = None
    capture_profile: Path | None = None
    baseline: Path | None = None
    diff_report: Path | None = None
    # features' inputs
    watermark_key: Secret | None = None
    log: Path | None = None
    baseline_log: Path | None = None
    manifests: Path | None = None
    checkpoint: Path | None = None
    target_version: Version | None = None
    baseline_url: str | None = None
    baseline_model: str | None = None
    baseline_is_target: bool = False
    baseline_api_key: Secret | None = None
    eval_baseline_file: Path | None = None
    eval_save: Path | None = None
    perf_baseline_file: Path | None = None
    perf_save: Path | None = None
    serving_witness: Path | None = None
    eval_task: tuple[str, ...] = ()
    eval_include_path: tuple[str, ...] = ()
    eval_limit: int | None = None
    eval_tolerance: float | None = None
    eval_confidence: float | None = None
    eval_max_detectable_drop: float | None = None
    eval_items: int | None = None
    eval_long_context_items: int | None = None
    eval_tokenizer: Path | None = None
    list_contracts: bool = False

    def secrets(self) -> list[str]:
        """Plain values of every secret setting, for redaction."""
        return [
            value.reveal() for field in fields(self) if isinstance(value := getattr(self, field.name), Secret) and value
        ]
