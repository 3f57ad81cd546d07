"""The auth suite FAILS, naming the contract, when a path reaches a guarded route past the key.

Behind a root path the bare paths (vLLM's own --root-path, which its key check strips as a string), and
spellings of a path an ingress reads otherwise than vLLM's router (docs/auth.md). Each run is pinned by
contract id; the healthy case is the hardened server mounted under the same prefix by an ingress.
"""

import pytest

from fixtures.fault_proxy import FaultProxy, KeyForPublicPaths, StripPrefix
from fixtures.server_specs import ROOT_PATH, TEST_KEY
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks, of_features
from tests.conftest import requires_vllm, run_suites
from tests.integration.test_suites_on_real_vllm import GATED_VERDICTS
from tests.support.profiles import GATED_PROFILE

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("hardened")]


@pytest.mark.pins(healthy={"auth.root_path_prefix_required", "auth.path_variants_refused"})
def test_a_server_mounted_under_a_prefix_by_its_ingress_keeps_its_bare_paths_guarded(pytester, gated_server):
    """An ingress that mounts the server at /v (the prefix stripped, the server without --root-path): the URL's
    path is a root path, and the bare paths reach the server's own key check."""
    with FaultProxy(gated_server.url, rules=[StripPrefix(prefix=ROOT_PATH)]) as ingress:
        run_suites(
            pytester,
            "-m",
            "auth",
            "-k",
            "root_path or path_variants or missing_key",
            f"--vllm-api-key={TEST_KEY}",
            url=f"{ingress.url}{ROOT_PATH}",
            profile=GATED_PROFILE,
        )
        assert ingress.hit_count(ingress.rules[0]) > 0
    junit = pytester.path / "junit.xml"
    # Every guarded route, three variants each under /v, once at the bare path.
    bare = len([run for run in contract_runs(junit) if run.contract == "auth.guarded_route_refuses_missing_key"]) // 3
    assert bare >= 15
    assert_verdicts(
        junit,
        {
            "auth.guarded_route_refuses_missing_key": "passed",
            "auth.root_path_prefix_required": {"passed": bare},
            "auth.path_variants_refused": {"passed": 7},
        },
    )


@pytest.mark.servers("root_path")
@pytest.mark.pins(failed={"auth.root_path_prefix_required"})
def test_a_root_path_that_begins_v1_opens_the_bare_paths_and_fails_auth(pytester, served):
    """Real vLLM 0.32 with --api-key and --root-path /v: its key check reads /v1/models as "1/models", its router
    serves /v1/models. Under the URL's /v every route is guarded; at the bare path every /v1 route answers anyone."""
    server = served("root_path")
    run_suites(
        pytester, "-m", "auth", f"--vllm-api-key={TEST_KEY}", url=f"{server.url}{ROOT_PATH}", profile=GATED_PROFILE
    )
    junit = pytester.path / "junit.xml"
    runs = [run for run in contract_runs(junit) if run.contract == "auth.root_path_prefix_required"]
    open_bare = {run.key for run in runs if run.case.split(" ")[1].startswith("/v1/")}
    assert len(open_bare) >= 10 and len(runs) > len(open_bare)  # the /inference routes stay guarded
    # The plain flags (a route table of its own): every other auth check is kept under /v.
    assert_verdicts(
        junit, {**of_features(GATED_VERDICTS, "auth"), "auth.root_path_prefix_required": "passed"}, failed=open_bare
    )
    message = failed_checks(junit)["auth.root_path_prefix_required[GET /v1/models (without the root path)]"]
    assert "GET /v1/models answered without a key at the bare path, outside the root path /v of the URL" in message
    assert "GET /v1/models -> 200" in message
    assert "reads /v1/models as '1/models'" in message
    assert "(vllm-project/vllm#52794)" in message
    assert "Start vLLM with a --root-path that none of those prefixes begins with" in message
    assert TEST_KEY not in junit.read_text()


@pytest.mark.pins(failed={"auth.path_variants_refused"})
def test_an_ingress_that_reads_paths_otherwise_than_vllm_fails_auth(pytester, gated_server):
    """An ingress that holds the key and adds it for paths it takes for public, read from the URL rebuilt from the
    Host header and compared case by case, then forwards the path normalised."""
    with FaultProxy(gated_server.url, rules=[KeyForPublicPaths(header_value=f"Bearer {TEST_KEY}")]) as proxy:
        run_suites(
            pytester,
            "-m",
            "auth",
            "-k",
            "path_variants",
            f"--vllm-api-key={TEST_KEY}",
            url=proxy.url,
            profile=GATED_PROFILE,
        )
    junit = pytester.path / "junit.xml"
    leaks = {
        f"auth.path_variants_refused[{variant}]"
        for variant in ("double slash", "upper case", "Host with a path", "Host with a query")
    }
    assert_verdicts(junit, {"auth.path_variants_refused": "passed"}, failed=leaks)
    failed = failed_checks(junit)
    assert (
        "GET //v1/models (double slash) answered without a key: GET //v1/models -> 200"
        in (failed["auth.path_variants_refused[double slash]"])
    )
    assert (
        "GET /v1/models with Host: <host>/health? (Host with a path) answered without a key"
        in (failed["auth.path_variants_refused[Host with a path]"])
    )
    assert TEST_KEY not in junit.read_text()
