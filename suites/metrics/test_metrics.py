"""/metrics is Prometheus text that exports what the version promises and the dashboards query.

The page is read with prometheus_client's own parser, as a scraper would.
Which families a version registers (``vllm:request_num_preemptions`` from
0.30, ``vllm:admission_rejections`` from 0.32, ...) is contract data; a
family tied to a feature is required only where the profile declares that
feature. ``metrics.dashboard_names`` lists series (what PromQL queries,
``vllm:num_preemptions_total``), and a missing one is named with the
version's replacement.
"""

import pytest

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.protocol.prometheus import ExpositionError, parse, reading_of

from .families import dashboard_series, expected_metric_families, series_gap


@pytest.fixture(scope="module")
def page(vllm_client, vllm_facts, vllm_expect):
    # A version may create the series of finished requests only once there is one.
    warm_up = vllm_expect.release.tiny_completion
    vllm_client.post(warm_up["path"], {"model": vllm_facts.model, **warm_up["body"]})
    return vllm_client.get(vllm_expect.release.metrics_path)


@pytest.fixture(scope="module")
def exposition(page):
    return reading_of(page).exposition


@pytest.fixture
def parsed(exposition, page):
    if exposition is None:
        pytest.skip(f"could not run: /metrics did not parse ({page.describe()}); see metrics.exposition_parses")
    return exposition


@contract("metrics.exposition_parses")
def test_exposition_parses(page, vllm_expect, vllm_evidence):
    assert page.status == 200 and not page.truncated, f"/metrics should answer 200 in full: {page.describe()}"
    try:
        exposition = parse(page.text)
    except ExpositionError as exc:
        pytest.fail(f"/metrics is not Prometheus text ({page.describe()}): {exc}", pytrace=False)
    prefix = vllm_expect.release.metric_prefix
    families = exposition.names_with_prefix(prefix)
    assert families, f"/metrics parses but holds no {prefix} family: {page.describe()}"
    vllm_evidence.judged(len(families), f"parsed {prefix} families")


@contract("metrics.version_families_exported")
@each("family", expected_metric_families)
def test_version_families_exported(family, parsed, vllm_expect, vllm_evidence):
    found = parsed.family(family.name)
    vllm_evidence.judged(1, "looked-up families")
    why = family.why(vllm_expect.version_label)
    assert found is not None, f"{family} is not on /metrics, but {why}"
    assert found.type == family.type, f"{family} is a {found.type} on /metrics, but {why} as a {family.type}"


@contract("metrics.dashboard_series_exported")
@each("series", dashboard_series)
def test_dashboard_series_exported(series, parsed, vllm_expect, vllm_evidence):
    vllm_evidence.judged(1, "looked-up series names")
    gap = series_gap(series.name, parsed, vllm_expect.release.metric_renames, vllm_expect.release.metric_conditions)
    assert gap is None, gap.describe(vllm_expect.version_label)
