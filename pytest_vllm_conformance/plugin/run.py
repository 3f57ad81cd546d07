"""The run's configuration and state: settings, declarations, secrets, target.

Built once in ``pytest_configure`` from the options, the profile and the
baseline; the target and its facts join at session start (on xdist workers,
handed over by the controller). Hooks, fixtures and the reporter read it
through ``run_state(config)``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_vllm_conformance.catalogue import applicability, contracts, route_cases
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.catalogue.serving_profile import Profile, ProfileError, load_profile
from pytest_vllm_conformance.connection import fleet, transport
from pytest_vllm_conformance.connection.client import BoundedClient, url_root_path
from pytest_vllm_conformance.connection.connect import ServerConnection, connection_for, ingress_key
from pytest_vllm_conformance.connection.discovery import ServerFacts
from pytest_vllm_conformance.connection.launcher import StartClocks
from pytest_vllm_conformance.connection.model_dir import checkpoint_dir
from pytest_vllm_conformance.connection.run_lock import RunLock
from pytest_vllm_conformance.connection.secrets import Redactor, Secret, url_password
from pytest_vllm_conformance.connection.settings import Settings
from pytest_vllm_conformance.plugin import options
from pytest_vllm_conformance.plugin.progress import Progress, silent, terminal_writer
from pytest_vllm_conformance.watermark import keys


@dataclass
class TargetState:
    """One target of the run: the server under test, or one replica of a fleet."""

    # The replica's name; "" for the one target of a run that is not a fleet (no replica names anywhere).
    name: str = ""
    given_url: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    expanded_from: str | None = None
    # What establishing it gave: its facts, its base URL, the server process when the run started one.
    connection: ServerConnection | None = None
    facts: ServerFacts | None = None
    base_url: str | None = None
    # The embedded server's log, also on xdist workers (which have no target of their own).
    serve_log: str | None = None
    # The embedded server's starts, timed as they happened (launcher.StartClocks), the tested server's last;
    # handed to xdist workers too.
    start_clocks: tuple[StartClocks, ...] = ()
    claims: dict[str, applicability.Claim] = field(default_factory=dict)
    # Shared by the controlling process and its xdist workers (none in a run without workers).
    run_lock: RunLock = field(default_factory=lambda: RunLock(None))
    lock_dir: str | None = None
    # Why this replica could not be reached: its tests fail saying so, the other replicas still run.
    problem: str | None = None

    @property
    def label(self) -> str:
        """How messages name it: the replica, else its URL."""
        return self.name or self.given_url or ""


@dataclass
class RunState:
    settings: Settings
    # Where each setting came from (cli, env, ini, default), for the report header.
    option_sources: options.Sources
    catalogue: contracts.Catalogue
    profile: Profile | None
    redactor: Redactor
    # One per replica; one (unnamed) for a run with a single target or none.
    targets: list[TargetState] = field(default_factory=lambda: [TargetState()])

    @property
    def fleet(self) -> bool:
        return len(self.targets) > 1

    @property
    def primary(self) -> TargetState:
        """The run's one target, or the first replica that was reached (the fleet's reference by default)."""
        return next((target for target in self.targets if target.facts is not None), self.targets[0])

    def replica(self, name: str) -> TargetState:
        return next(target for target in self.targets if target.name == name)

    @property
    def facts(self) -> ServerFacts | None:
        return self.primary.facts

    @property
    def connection(self) -> ServerConnection | None:
        return self.primary.connection

    @property
    def base_url(self) -> str | None:
        return self.primary.base_url

    @property
    def serve_log(self) -> str | None:
        return self.primary.serve_log

    @property
    def start_clocks(self) -> tuple[StartClocks, ...]:
        return self.primary.start_clocks

    @property
    def run_lock(self) -> RunLock:
        return self.primary.run_lock

    @property
    def url(self) -> str:
        """The target's base URL; only asked for once the run has a target (discovered, or handed over)."""
        if self.base_url is None:
            raise RuntimeError("the run has no target yet")
        return self.base_url

    @property
    def separate_ingress(self) -> bool:
        """An ingress in front of the target (--vllm-ingress-url beside --vllm-url or --vllm-serve)."""
        ingress = self.settings.ingress_url
        return bool(ingress) and self.base_url is not None and ingress != self.base_url

    clients: list[BoundedClient] = field(default_factory=list)
    watermark_key: Secret | None = None
    baseline: Profile | None = None
    header_notes: list[str] = field(default_factory=list)
    # The shard set this run declares (--vllm-shard, --vllm-shard-replicas), as its report writes it.
    shard: dict[str, Any] | None = None
    # Whether the run sets any option of the plugin or names its suites (options.plugin_run): a run that does
    # neither and runs none of its contract tests is a guest's, and ends as it would without the plugin.
    plugin_run: bool = False
    # What cut the run short, when a signal did ("SIGTERM"); Ctrl-C is pytest's own KeyboardInterrupt.
    interrupted_by: str | None = None
    # Lines for phases long enough to look hung (plugin/progress.py); silent until configure_run wires the terminal.
    progress: Progress = field(default_factory=lambda: Progress(silent))

    def expectations(self, target: TargetState | None = None) -> Expectations:
        facts = (target or self.primary).facts
        version = facts.parsed_version if facts else None
        return Expectations(self.catalogue, version, self.profile, self.baseline)

    def inputs(self, target: TargetState | None = None) -> dict[str, bool]:
        """Which inputs a contract may be claimed on (applicability.INPUTS) or need (NEEDS) this run has."""
        settings = self.settings
        target = target or self.primary
        return {
            "baseline": bool(settings.baseline),
            "quality_baseline": bool(settings.baseline_url or settings.eval_baseline_file or settings.eval_save),
            "serving_baseline": bool(settings.baseline_url or settings.perf_baseline_file),
            "live_serving_baseline": bool(settings.baseline_url),
            "live_baseline": bool(settings.baseline_url),
            "manifests": bool(settings.manifests),
            "server_log": bool(settings.log or target.serve_log),
            "startup_baseline_log": bool(settings.baseline_log),
            "eval_task": bool(settings.eval_task),
            "checkpoint": checkpoint_dir(settings.checkpoint, settings.serve) is not None,
            "ingress": bool(settings.ingress_url),
            "root_path": bool(url_root_path(settings.ingress_url or target.base_url or target.given_url or "")),
            "fleet": self.fleet,
            # Every process knows it from the options: an xdist worker owns no process, but the run still does.
            "managed_server": bool(settings.serve) and not self.fleet,
            # Unknown (no /metrics page) counts as on, vLLM's default: the test then proves a hit or is undecided.
            "prefix_caching": target.facts is None or target.facts.prefix_caching is not False,
            # Unknown counts as small: the test then sends the load, and the preemption counter decides.
            "preemptible_kv_cache": target.facts is None or _preemptible(target.facts),
            # An adapter on /v1/models (a card whose parent is the served model), or adapters the profile declares.
            "lora_adapters": bool(target.facts and target.facts.lora_adapters) or bool(_declared_adapters(self)),
            "lora_runtime": target.facts is not None and target.facts.serves("POST", "/v1/load_lora_adapter"),
            # The key callers send where the run's requests go (the ingress's own, else the server's).
            "api_key": bool(ingress_key(settings)),
            "watermark_key": self.watermark_key is not None,
            "server_behind_ingress": not (settings.ingress_url and not (settings.url or settings.serve)),
            "reported_max_model_len": target.facts is not None and isinstance(target.facts.max_model_len, int),
            "anthropic_sdk": importlib.util.find_spec("anthropic") is not None,
            # What the server serves (applicability.SERVES), from its route table: generation, pooling.
            **route_cases.served_tasks(self.catalogue, target.facts),
        }

    def claim(self, contract_id: str, target: TargetState | None = None) -> applicability.Claim:
        """Decided once per contract per target per process, after the target is known (facts name the version)."""
        target = target or self.primary
        if contract_id not in target.claims:
            contract = self.catalogue.contract(contract_id)
            target.claims[contract_id] = applicability.claim(
                contract, self.catalogue, self.expectations(target), self.inputs(target)
            )
        return target.claims[contract_id]


STATE = pytest.StashKey[RunState]()


def _declared_adapters(state: RunState) -> list[str]:
    """The LoRA adapters the profile declares (lora.adapters), none when it declares none."""
    return list((state.profile.get("lora", "adapters") if state.profile is not None else None) or [])


def _preemptible(facts: ServerFacts) -> bool:
    """Whether the preemption contract's load could overfill the server's KV cache: it holds fewer tokens than
    MOST_PREEMPTION_REQUESTS requests of the model's whole context (unknown: it could)."""
    tokens, length = facts.kv_cache_tokens, facts.max_model_len
    return tokens is None or not isinstance(length, int) or tokens < applicability.MOST_PREEMPTION_REQUESTS * length


def run_state(config: pytest.Config) -> RunState:
    return config.stash[STATE]


def configure_run(config: pytest.Config) -> RunState:
    """Everything the run knows before it reaches a server; a bad input is one usage error."""
    settings, sources = options.resolve(config)
    try:
        profile = load_profile(settings.profile) if settings.profile else None
    except ProfileError as exc:
        raise pytest.UsageError(str(exc)) from None
    _check_checkpoint(settings.checkpoint)
    _check_serve(settings.serve)
    tls = transport.tls_problem(connection_for(settings))
    if tls is not None:
        raise pytest.UsageError(tls)
    baseline = _load_baseline(settings.baseline) if settings.baseline else None
    redactor = Redactor(settings.secrets())
    watermark_key = _watermark_key(settings, profile)
    for spelling in keys.spellings(watermark_key.reveal()) if watermark_key else ():
        redactor.add(spelling)
    state = RunState(
        settings,
        sources,
        contracts.load(),
        profile,
        redactor,
        targets=_targets(settings),
        watermark_key=watermark_key,
        baseline=baseline,
        shard=shard_declaration(settings),
        plugin_run=options.plugin_run(config),
        progress=Progress(terminal_writer(config), redactor),
    )
    for target in state.targets:
        redactor.add(url_password(target.given_url))
    config.stash[STATE] = state
    return state


def _check_serve(path: Path | None) -> None:
    """--vllm-serve on a folder that is not there: refused now, not by vLLM after a start of a minute and a GB."""
    if path is not None and not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise pytest.UsageError(f"--vllm-serve: {path} {what}: give the model's directory (config.json, weights)")


def _check_checkpoint(path: Path | None) -> None:
    if path is not None and not (path / "config.json").is_file():
        what = "has no config.json" if path.is_dir() else "is not a directory"
        raise pytest.UsageError(f"--vllm-checkpoint: {path} {what}: give a model directory (config.json, weights)")


MAX_SHARDS = 10_000


def shard_declaration(settings: Settings) -> dict[str, Any] | None:
    """The set of shards the run belongs to: ``{index, total}`` or ``{replica, replicas}``; else a usage error."""
    if settings.shard and settings.shard_replicas:
        raise pytest.UsageError("--vllm-shard and --vllm-shard-replicas: give one, the index or the replicas")
    if (settings.shard or settings.shard_replicas) and settings.report is None:
        flag = "--vllm-shard" if settings.shard else "--vllm-shard-replicas"
        raise pytest.UsageError(
            f"{flag} needs --vllm-report=PATH: a shard's report is what `vllm-conformance merge` reads; without it "
            "the shard's verdicts are lost"
        )
    declaration = _shard_set(settings)
    run = settings.shard_run.strip() if settings.shard_run else ci_run_id(os.environ)
    if declaration is not None and run:
        declaration["run"] = run[:200]
    return declaration


# The CI's id of the run (pipeline, workflow) its jobs share: the shards of one run are the jobs of one such run.
CI_RUN_IDS = (
    ("GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT"),
    ("CI_PIPELINE_ID", None),
    ("BUILDKITE_BUILD_ID", None),
    ("CIRCLE_WORKFLOW_ID", None),
    ("BUILD_TAG", None),
)


def ci_run_id(environ: Mapping[str, str]) -> str | None:
    """``github:123-1``: which CI run this process is a job of, if a known CI says."""
    for variable, attempt in CI_RUN_IDS:
        if environ.get(variable):
            suffix = f"-{environ[attempt]}" if attempt and environ.get(attempt) else ""
            return f"{variable}={environ[variable]}{suffix}"
    return None


def _shard_set(settings: Settings) -> dict[str, Any] | None:
    if settings.shard:
        index, slash, total = settings.shard.strip().partition("/")
        if not (slash and index.isdigit() and total.isdigit() and 1 <= int(index) <= int(total) <= MAX_SHARDS):
            raise pytest.UsageError(
                f"--vllm-shard: {settings.shard[:40]!r} is not valid: give I/N, shard I of N (1 <= I <= N <= "
                f"{MAX_SHARDS}), e.g. 2/4"
            )
        return {"index": int(index), "total": int(total)}
    if not settings.shard_replicas:
        return None
    replicas = list(dict.fromkeys(settings.shard_replicas))
    if len(settings.url) != 1 or settings.url[0] not in replicas:
        raise pytest.UsageError(
            "--vllm-shard-replicas: give the run one --vllm-url, the replica this shard checks, and list it among "
            f"the replicas ({', '.join(replicas)})"
        )
    return {"replica": settings.url[0], "replicas": replicas}


def _targets(settings: Settings) -> list[TargetState]:
    """One target state per replica (--vllm-url given more than once, --vllm-fleet); one unnamed one otherwise."""
    try:
        replicas = [fleet.Replica(fleet.default_name(url), url) for url in settings.url]
        expand = settings.fleet_expand_dns
        if settings.fleet is not None:
            listed, expand_listed = fleet.load_fleet_file(settings.fleet, options.server_url)
            replicas += listed
            expand = expand or expand_listed
        if expand:
            replicas = fleet.expand_dns(replicas)
        replicas = fleet.unique_names(replicas)
    except fleet.FleetError as exc:
        raise pytest.UsageError(str(exc)) from None
    if len(replicas) <= 1:
        return [TargetState(given_url=replica.url) for replica in replicas] or [TargetState()]
    return [
        TargetState(replica.name, replica.url, replica.labels, expanded_from=replica.expanded_from)
        for replica in replicas
    ]


def _load_baseline(path: Path) -> Profile:
    """--vllm-baseline: a profile file that holds a capture's observed section."""
    try:
        baseline = load_profile(path)
    except ProfileError as exc:
        raise pytest.UsageError(f"--vllm-baseline: {exc}") from None
    if "observed" not in baseline.data:
        raise pytest.UsageError(
            f"--vllm-baseline: profile {path} has no observed section; capture one with --vllm-capture-profile=PATH"
        )
    return baseline


def _watermark_key(settings: Settings, profile: Profile | None) -> Secret | None:
    """--vllm-watermark-key, else the environment variable the profile's watermark.key_env names."""
    variable = profile.get("watermark", "key_env") if profile else None
    key: Secret | None
    if settings.watermark_key:
        key, given = settings.watermark_key, "--vllm-watermark-key"
    else:
        value = os.environ.get(variable, "").strip() if variable else ""
        key, given = (Secret(value) if value else None), f"{variable} (the profile's watermark.key_env)"
    if key is not None and keys.too_small(key.reveal()):
        raise pytest.UsageError(
            f"{given}: a watermark key below {keys.MIN_KEY} is refused: a key that small is found by trying "
            "each one against the detector, and cannot be masked in output without masking ordinary numbers; "
            "give the server a larger one"
        )
    return key
