"""The profile diff for people: the differences as a Markdown table, written beside the baseline."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.observed.diff import Difference, Observed, differences


def default_report_path(baseline_path: Path) -> Path:
    """``canary.yaml`` -> ``canary.diff.md`` beside it."""
    return Path(baseline_path).with_suffix(".diff.md")


def _cell(value: Any) -> str:
    text = "—" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(found: list[Difference], baseline_label: str, target_label: str) -> str:
    failing = sum(d.matters for d in found)
    lines = [
        "# Serving profile diff",
        "",
        f"- baseline: {baseline_label}",
        f"- target: {target_label}",
        f"- {len(found)} difference(s), {failing} that matter(s) for serving",
        "",
    ]
    if not found:
        lines.append("No difference.")
        return "\n".join(lines) + "\n"
    lines += ["| difference | baseline | target | verdict | why |", "|---|---|---|---|---|"]
    for d in found:
        verdict = "**fails**" if d.matters else d.verdict
        lines.append(f"| {_cell(d.id)} | {_cell(d.before)} | {_cell(d.after)} | {verdict} | {_cell(d.why)} |")
    return "\n".join(lines) + "\n"


def describe_observation(observed: Observed, where: str) -> str:
    """``/path/base.yaml (vLLM 0.32.0, model m, captured 2025-...)`` for report headers."""
    return (
        f"{where} (vLLM {observed.get('vllm_version') or 'unknown'}, model {observed.get('model')}, "
        f"captured {observed.get('captured_at')})"
    )


def write_report(
    path: Path,
    baseline: Observed,
    baseline_where: str,
    target: Observed,
    redact: Callable[[str], str] = str,
    ignore: Iterable[str] = (),
) -> tuple[Path, list[Difference]]:
    found = differences(baseline, target, ignore)
    text = render_markdown(
        found, describe_observation(baseline, baseline_where), describe_observation(target, str(target.get("url")))
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(redact(text))
    return path, found
