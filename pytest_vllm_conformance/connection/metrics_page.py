"""The server's /metrics page as samples, read with prometheus_client's own parser (never a regex).

The floor below every room: discovery reads the server's cache configuration
here, and a feature room reads its counters and gauges. The metrics suite's
fuller reader (families, series, the dashboard gaps) stays in its own room.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vllm_conformance.connection.client import BoundedClient


@dataclass(frozen=True)
class Sample:
    name: str  # the series (a counter's ends in _total)
    labels: dict[str, str]
    value: float


def samples(text: str) -> list[Sample] | None:
    """Every sample of the page, or None when it is not Prometheus text."""
    # Imported here: most runs never read /metrics.
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [
            Sample(sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]
    except (ValueError, IndexError, KeyError, TypeError):
        return None


def read(client: BoundedClient, path: str = "/metrics") -> tuple[list[Sample] | None, str]:
    """The page's samples now, or None and why not. Never raises."""
    page = client.answer_or_none("GET", path)
    if page is None:
        return None, f"GET {path}: no answer"
    if page.status != 200 or page.truncated:
        return None, f"GET {path}: {page.describe()}"
    found = samples(page.text)
    return found, "" if found is not None else f"GET {path}: not Prometheus text"


def total(found: list[Sample], family: str) -> float | None:
    """A counter's or gauge's sum over every label set (a counter by its _total series), None if absent."""
    values = [s.value for s in found if s.name in (family, family + "_total")]
    return sum(values) if values else None


def prefix_caching(found: list[Sample] | None) -> bool | None:
    """What vllm:cache_config_info says of enable_prefix_caching; None: not read, or not on the page.

    vLLM exports its CacheConfig as this info gauge's labels (vllm/v1/metrics/loggers.py, log_metrics_info,
    and vllm/config/cache.py, metrics_info, at v0.28.0, v0.29.0 and v0.32.0).
    """
    for sample in found or ():
        if sample.name == "vllm:cache_config_info" and "enable_prefix_caching" in sample.labels:
            return sample.labels["enable_prefix_caching"] == "True"
    return None
