"""The run's targets at session start: each one reached, observed, and handed to the xdist workers.

A run with one target stops at once on a target it cannot reach, as it
always has. A fleet (several replicas) does not: an unreachable replica's
problem is kept, its tests fail at setup naming it, and the other replicas
still run; only a fleet none of whose replicas answers stops the run.
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from pytest_vllm_conformance.catalogue import contracts, route_cases
from pytest_vllm_conformance.connection.client import BoundedClient, display_url
from pytest_vllm_conformance.connection.connect import ServerConnection, client_for, establish
from pytest_vllm_conformance.connection.discovery import DiscoveryError, ServerFacts
from pytest_vllm_conformance.connection.launcher import LaunchError, StartClocks
from pytest_vllm_conformance.connection.run_lock import RunLock
from pytest_vllm_conformance.observed import capture
from pytest_vllm_conformance.plugin.run import RunState, TargetState
from pytest_vllm_conformance.protocol import prometheus

# The session-scoped fixture every target fixture depends on; a fleet parametrizes it per replica.
TARGET_PARAMETER = "vllm_target"
REPLICA_PROPERTY = "vllm_replica"
# The xdist modes a fleet schedules itself: pytest-xdist's default under -n, and its grouping mode.
GROUPED_DIST = ("load", "loadgroup")


Establish = Callable[..., ServerConnection]


def establish_all(state: RunState, establish: Establish = establish) -> None:
    """Discovery (and the capture, when asked for) of every target, in the controlling process."""
    if not state.fleet:
        _establish_one(state, state.targets[0], establish)
        return
    for target in state.targets:
        try:
            _establish_one(state, target, establish)
        except pytest.UsageError as exc:
            target.problem = state.redactor(f"replica {target.name} ({display_url(target.given_url or '')}): {exc}")
    if all(target.problem for target in state.targets):
        raise pytest.UsageError("no replica of the fleet could be reached:\n" + "\n".join(_problems(state)))
    state.header_notes.extend(f"vllm unreachable: {problem}" for problem in _problems(state))


def _problems(state: RunState) -> list[str]:
    return [target.problem for target in state.targets if target.problem]


def _establish_one(state: RunState, target: TargetState, establish: Establish) -> None:
    known_routes = functools.partial(route_cases.known_routes, state.catalogue)
    try:
        # One target: the settings say where (--vllm-url, --vllm-serve or --vllm-ingress-url).
        target.connection = (
            establish(state.settings, known_routes, url=target.given_url, read_prefix_caching=prefix_caching)
            if state.fleet
            else establish(
                state.settings,
                known_routes,
                progress=state.progress.phase("--vllm-serve"),
                read_prefix_caching=prefix_caching,
            )
        )
    except (DiscoveryError, LaunchError) as exc:
        raise pytest.UsageError(state.redactor(str(exc))) from None
    except contracts.ReleaseNotCovered as exc:
        # The first fact discovery asks of a release older than the catalogue: nothing in the run could be judged.
        raise pytest.UsageError(_at_target(state, target, str(exc))) from None
    target.facts = target.connection.facts
    version = target.facts.parsed_version
    if version is not None and state.catalogue.releases.is_older(version):
        raise pytest.UsageError(_at_target(state, target, state.catalogue.releases.refusal(version)))
    target.base_url = target.connection.base_url
    target.serve_log = str(target.connection.log_path) if target.connection.log_path else None
    target.start_clocks = target.connection.start_clocks
    _observe(state, target)


def prefix_caching(client: BoundedClient, version: Version | None) -> tuple[bool | None, int | None]:
    """Whether the server caches prefixes, and the tokens its KV cache holds, as its /metrics says (the claims of
    the engine_invariants cache and preemption contracts)."""
    reading = prometheus.read(client, "/metrics")
    try:
        size = prometheus.kv_cache_size(reading, contracts.load().fact("kv_cache_capacity", version))
    except contracts.NoFact:  # a release older than the catalogue: refused once discovery has its version
        size = None
    return prometheus.prefix_caching(reading), size.tokens if size is not None else None


def _at_target(state: RunState, target: TargetState, problem: str) -> str:
    where = target.given_url or state.settings.ingress_url
    return state.redactor(f"{display_url(where)}: {problem}" if where else problem)


def _per_replica(path: Path | None, target: TargetState) -> Path | None:
    """A fleet writes one capture (and one diff) per replica: ``canary.yaml`` -> ``canary.NAME.yaml``."""
    if path is None or not target.name:
        return path
    safe = target.name.replace(":", "_").replace("/", "_")
    return path.with_name(f"{path.stem}.{safe}{path.suffix}")


def _observe(state: RunState, target: TargetState) -> None:
    """Capture and baseline: observe the target once and hand the observation on in its facts.

    A fleet observes every replica: the fleet feature compares them.
    """
    settings = state.settings
    # A shard of a fleet is observed too: the merge compares the shards' observations as the fleet does.
    if not settings.capture_profile and state.baseline is None and not state.fleet and state.shard is None:
        return
    assert target.facts is not None and target.base_url is not None, "observed after discovery"
    diff_report = settings.diff_report
    if state.baseline is not None and target.name:
        diff_report = _per_replica(
            diff_report or Path(f"{state.baseline.path or 'baseline'}").with_suffix(".diff.md"), target
        )
    with client_for(settings, target.base_url) as client:
        try:
            observed, notes = capture.observe_and_record(
                client,
                target.facts,
                state.catalogue,
                capture_path=_per_replica(settings.capture_profile, target),
                baseline=state.baseline,
                diff_report=diff_report,
                redactor=state.redactor,
                baseline_ignore=state.expectations(target).declared("profile_diff", "ignore").value,
                start_clocks={
                    start: {name: round(seconds, 2) for name, seconds in clocks.read().items()}
                    for start, clocks in zip(("first", "second"), target.start_clocks, strict=False)
                },
            )
        except OSError as exc:
            raise pytest.UsageError(f"cannot write {exc.filename}: {exc.strerror or exc}") from None
    target.facts = dataclasses.replace(target.facts, observed=observed)
    prefix = f"[{target.name}] " if target.name else ""
    state.header_notes.extend(prefix + note for note in notes)


def hand_over(state: RunState) -> dict[str, Any] | None:
    """What an xdist worker receives instead of probing again: each target's facts and run lock."""
    if state.facts is None:
        return None
    handed = []
    for target in state.targets:
        if target.lock_dir is None and target.facts is not None:
            target.lock_dir = tempfile.mkdtemp(prefix="vllm-conformance-lock-")
        handed.append(
            {
                "facts": target.facts.to_dict() if target.facts is not None else None,
                "base_url": target.base_url,
                "serve_log": target.serve_log,
                "start_clocks": [clocks.to_dict() for clocks in target.start_clocks],
                "lock_dir": target.lock_dir,
                "problem": target.problem,
            }
        )
    return {"targets": handed}


def take_over(state: RunState, handed_over: dict[str, Any]) -> None:
    for target, handed in zip(state.targets, handed_over["targets"], strict=True):
        target.facts = ServerFacts.from_dict(handed["facts"]) if handed["facts"] is not None else None
        target.base_url = handed["base_url"]
        target.serve_log = handed.get("serve_log")
        target.start_clocks = tuple(StartClocks.from_dict(clocks) for clocks in handed.get("start_clocks", ()))
        target.problem = handed.get("problem")
        if handed.get("lock_dir"):
            target.run_lock = RunLock(Path(handed["lock_dir"]))


def target_of(state: RunState, item: Any) -> TargetState:
    """The target an item runs against: its replica parameter in a fleet, else the run's one target."""
    callspec = getattr(item, "callspec", None)
    name = callspec.params.get(TARGET_PARAMETER) if callspec is not None else None
    return state.replica(name) if isinstance(name, str) and state.fleet else state.primary


def header_lines(state: RunState) -> list[str]:
    """A fleet's header: one line per replica (the one-target header is hooks.pytest_report_header's)."""
    lines = [f"vllm fleet: {len(state.targets)} replicas"]
    expanded = sorted({target.expanded_from for target in state.targets if target.expanded_from})
    if expanded:
        lines.append(f"vllm fleet: expanded from DNS: {', '.join(expanded)}")
    for target in state.targets:
        facts = target.facts
        where = display_url(target.base_url or target.given_url or "")
        if facts is None:
            lines.append(f"vllm replica {target.name}: {where}: not reached")
            continue
        labels = "".join(f", {key}={value}" for key, value in sorted(target.labels.items()))
        lines.append(
            f"vllm replica {target.name}: {where}; version {facts.version or 'unknown'}; model {facts.model}; "
            f"max_model_len {facts.max_model_len}{labels}"
        )
    return lines


def replica_scheduler(config: pytest.Config, log: Any, replicas: list[str]) -> Any:
    """pytest-xdist's scope scheduling with one scope per replica: a replica's tests go to one worker.

    Read from the test id (``[NAME]`` or ``[NAME-case]``), so ids stay what a
    serial run gives; a test of no replica (the fleet's own) is a scope alone.
    """
    from xdist.scheduler import LoadScopeScheduling

    longest_first = sorted(replicas, key=len, reverse=True)

    class ReplicaScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            params = nodeid.partition("[")[2]
            for name in longest_first:
                if params.startswith((f"{name}]", f"{name}-")):
                    return f"replica {name}"
            return nodeid

    return ReplicaScheduling(config, log)
