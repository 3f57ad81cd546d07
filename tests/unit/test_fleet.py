"""A fleet: its replicas from URLs, a fleet file or DNS, and what replicas must agree on."""

import pytest

from pytest_vllm_conformance.connection.fleet import (
    FleetError,
    Replica,
    default_name,
    expand_dns,
    load_fleet_file,
    unique_names,
)
from pytest_vllm_conformance.observed.replicas import (
    AGREES,
    ODD,
    SPLIT,
    UNDECIDED,
    Declared,
    Fleet,
    Member,
    decide,
    disallowed_versions,
    side_by_side,
    skew,
)
from pytest_vllm_conformance.plugin.options import server_url
from tests.unit.sample_observation import observation

OBSERVED = observation()
ROUTES = OBSERVED["routes"]


def test_a_replica_is_named_host_and_port_unless_named():
    assert default_name("http://10.0.0.7:8000") == "10.0.0.7:8000"
    assert default_name("https://vllm.example") == "vllm.example:443"


def test_a_fleet_file_lists_replicas_with_names_and_labels(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "replicas:\n"
        "  - {url: 'http://a:8000/', name: pod-a, labels: {zone: eu, canary: true}}\n"
        "  - {url: 'http://b:8000'}\n"
    )
    replicas, expand = load_fleet_file(path, server_url)
    assert replicas == [
        Replica("pod-a", "http://a:8000", {"zone": "eu", "canary": "True"}),
        Replica("b:8000", "http://b:8000"),
    ]
    assert expand is False


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("replicas: []", "replicas: [] should be non-empty"),
        ("replicas:\n  - {name: a}", "replicas.0: 'url' is a required property"),
        ("replicas:\n  - {url: 'ftp://a'}", "replicas.0.url: 'ftp://a' does not match"),
        ("replicas:\n  - {url: 'http://a', port: 1}", "replicas.0: Additional properties are not allowed"),
        ("replicas:\n  - {url: 'http://a?token=x'}", "replicas.0.url: a server's base URL takes no query string"),
        ("[", "not valid YAML"),
    ],
)
def test_a_bad_fleet_file_is_one_clear_error(tmp_path, text, problem):
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    with pytest.raises(FleetError, match="fleet file") as raised:
        load_fleet_file(path, server_url)
    assert problem in str(raised.value)


def test_two_replicas_under_one_name_are_refused():
    with pytest.raises(FleetError, match="two replicas are named 'a:80'"):
        unique_names([Replica("a:80", "http://a"), Replica("a:80", "http://a")])


@pytest.mark.parametrize(
    "urls",
    [
        ("http://10.0.0.1:8000", "http://10.0.0.1:8000"),
        ("http://VLLM-A:8000/v1", "http://vllm-a:8000/v1/"),
        ("http://a", "HTTP://a:80"),
        ("https://a:443", "https://a"),
    ],
)
def test_one_server_listed_twice_under_two_names_is_refused(urls):
    with pytest.raises(FleetError, match=r"replicas 'one' and 'two' are one server \(.*\): a fleet lists each replica"):
        unique_names([Replica("one", urls[0]), Replica("two", urls[1])])
    unique_names([Replica("one", "http://a:8000"), Replica("two", "http://a:8001"), Replica("three", "http://a/p")])


def test_a_fleet_file_listing_one_url_twice_stops_the_run_as_the_url_twice_does(pytester, monkeypatch):
    monkeypatch.delenv("VLLM_URL", raising=False)
    fleet = pytester.path / "fleet.yaml"
    fleet.write_text("replicas:\n  - {name: a, url: 'http://127.0.0.1:1'}\n  - {name: b, url: 'http://127.0.0.1:1/'}\n")
    result = pytester.runpytest("-p", "no:cacheprovider", f"--vllm-fleet={fleet}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: replicas 'a' and 'b' are one server (http://127.0.0.1:1)*"])
    twice = pytester.runpytest(
        "-p", "no:cacheprovider", "--vllm-url=http://127.0.0.1:1", "--vllm-url=http://127.0.0.1:1"
    )
    assert twice.ret == pytest.ExitCode.USAGE_ERROR


def test_a_name_resolving_to_several_addresses_is_expanded_only_when_asked():
    resolver = {"vllm-headless": ["10.0.0.1", "10.0.0.2"], "single": ["10.0.0.9"]}
    replicas = [Replica("pool", "http://user:pw@vllm-headless:8000/v1"), Replica("one", "http://single:8000")]
    expanded = expand_dns(replicas, lambda host, port: resolver[host])
    assert [(r.name, r.url, r.expanded_from) for r in expanded] == [
        ("pool-10.0.0.1", "http://user:pw@10.0.0.1:8000/v1", "vllm-headless"),
        ("pool-10.0.0.2", "http://user:pw@10.0.0.2:8000/v1", "vllm-headless"),
        ("one", "http://single:8000", None),
    ]


def test_several_urls_come_from_the_command_line_or_a_comma_separated_env(pytester, monkeypatch):
    pytester.makeconftest(
        """
        from pytest_vllm_conformance.plugin.run import run_state

        def pytest_collection_finish(session):
            state = run_state(session.config)
            print("TARGETS", [(t.name, t.given_url) for t in state.targets])
        """
    )
    monkeypatch.setenv("VLLM_URL", "http://a:8000, http://b:8001")
    result = pytester.runpytest("-s", "-p", "no:cacheprovider", "--collect-only")
    result.stdout.fnmatch_lines(["TARGETS [('a:8000', 'http://a:8000'), ('b:8001', 'http://b:8001')]"])
    monkeypatch.delenv("VLLM_URL")
    result = pytester.runpytest("-s", "-p", "no:cacheprovider", "--collect-only", "--vllm-url=http://a:8000")
    result.stdout.fnmatch_lines(["TARGETS [('', 'http://a:8000')]"])  # one target: no replica name


def test_replicas_of_one_release_must_agree_on_everything():
    other = observation(routes=[*ROUTES, "POST /v1/responses"])
    found = skew(OBSERVED, other, None, ())
    assert [d.id for d in found] == ["route added: POST /v1/responses"]
    assert "route added: POST /v1/responses: a=None b='POST /v1/responses'" in side_by_side("a", "b", found)


def test_a_declared_rolling_upgrade_allows_two_versions_and_nothing_else():
    newer = observation(vllm_version="0.32.0", routes=[*ROUTES, "POST /v1/responses"])
    assert skew(OBSERVED, newer, ["0.31.0", "0.32.0"], ()) == []
    shorter = {**newer, "models": [{**OBSERVED["models"][0], "max_model_len": 256}]}
    assert [d.id for d in skew(OBSERVED, shorter, ["0.31.0", "0.32.0"], ())] == ["max_model_len: 2048 -> 256"]
    fleet = Fleet((Member("a", OBSERVED), Member("b", newer), Member("c", observation(vllm_version="0.30.1"))))
    assert disallowed_versions(fleet, ["0.31", "0.32"], ("a", "b", "c")) == ["c: 0.30.1"]
    assert disallowed_versions(fleet, None, ("a", "b", "c")) == []


def test_each_replica_is_in_the_test_id_and_one_target_keeps_its_ids(pytester):
    from tests.conftest import SUITES

    two = pytester.runpytest_subprocess(
        str(SUITES / "discovery" / "test_discovery.py"),
        "--collect-only",
        "-q",
        "--vllm-url=http://a:8000",
        "--vllm-url=http://b:8000",
    )
    assert "suites/discovery/test_discovery.py::test_version_parses[a:8000]" in two.stdout.str()
    assert "suites/discovery/test_discovery.py::test_version_parses[b:8000]" in two.stdout.str()
    one = pytester.runpytest_subprocess(
        str(SUITES / "discovery" / "test_discovery.py"), "--collect-only", "-q", "--vllm-url=http://a:8000"
    )
    assert "suites/discovery/test_discovery.py::test_version_parses\n" in one.stdout.str() + "\n"


def test_a_bad_fleet_file_stops_the_run_before_any_request(pytester):
    (pytester.path / "fleet.yaml").write_text("replicas:\n  - {name: a}\n")
    result = pytester.runpytest("-p", "no:cacheprovider", f"--vllm-fleet={pytester.path / 'fleet.yaml'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*fleet file*1 problem(s)*", "*replicas.0: 'url' is a required property*"])


def outcomes(fleet: Fleet, declared: Declared | None = None) -> dict[str, str]:
    return {name: judgement.outcome for name, judgement in decide(fleet, declared or Declared()).items()}


def test_the_first_replica_on_another_release_is_the_odd_one_out_not_its_peers():
    skewed = observation(vllm_version="0.30.1")
    fleet = Fleet((Member("a", skewed), Member("b", OBSERVED), Member("c", OBSERVED)))
    judged = decide(fleet, Declared())
    assert {name: j.outcome for name, j in judged.items()} == {"a": ODD, "b": AGREES, "c": AGREES}
    assert "replica a is the odd one out against the majority b, c (2 of 3 replicas agree)" in judged["a"].message
    assert "vLLM version: 0.31.0 -> 0.30.1: b='0.31.0' a='0.30.1'" in judged["a"].message
    assert judged["b"].compared == 2


def test_a_tie_fails_each_tied_replica_and_a_replica_agreeing_with_neither_side_is_odd():
    short = observation(max_model_len=256, models=[{**OBSERVED["models"][0], "max_model_len": 256}])
    two = Fleet((Member("a", OBSERVED), Member("b", short)))
    judged = decide(two, Declared())
    assert {name: j.outcome for name, j in judged.items()} == {"a": SPLIT, "b": SPLIT}
    assert "the fleet splits 1 (a) against 1 (b): its replicas serve differently, which fails the fleet" in (
        judged["a"].message
    )
    assert "says which side is wrong" in judged["a"].message
    assert "max_model_len: 256 -> 2048: b=256 a=2048" in judged["a"].message
    newer = observation(vllm_version="0.32.0")
    five = Fleet(
        (Member("a", OBSERVED), Member("b", OBSERVED), Member("c", short), Member("d", short), Member("e", newer))
    )
    assert outcomes(five) == {"a": SPLIT, "b": SPLIT, "c": SPLIT, "d": SPLIT, "e": ODD}


def test_what_the_profile_declares_outweighs_the_majority():
    short = observation(max_model_len=256, models=[{**OBSERVED["models"][0], "max_model_len": 256}])
    fleet = Fleet((Member("a", short), Member("b", OBSERVED), Member("c", OBSERVED)))
    judged = decide(fleet, Declared(max_model_len=256))
    assert {name: j.outcome for name, j in judged.items()} == {"a": AGREES, "b": ODD, "c": ODD}
    assert "replica b does not serve what the profile declares: max_model_len 2048, the profile declares " in (
        judged["b"].message
    )
    assert "odd one out against a, the only replica(s) that serve what the profile declares" in judged["b"].message
    # One against one, the profile decides: no tie.
    pair = Fleet((Member("a", OBSERVED), Member("b", short)))
    assert outcomes(pair, Declared(max_model_len=2048)) == {"a": AGREES, "b": ODD}
    assert outcomes(pair, Declared(auth="required", scale_out="disabled")) == {"a": SPLIT, "b": SPLIT}
    opened = observation(auth={"posture": "none"})
    assert outcomes(Fleet((Member("a", opened), Member("b", OBSERVED))), Declared(auth="required")) == {
        "a": ODD,
        "b": AGREES,
    }


def test_a_declared_reference_decides_and_an_unobserved_one_decides_nothing():
    short = observation(max_model_len=256, models=[{**OBSERVED["models"][0], "max_model_len": 256}])
    fleet = Fleet((Member("a", OBSERVED), Member("b", OBSERVED), Member("c", short)))
    assert outcomes(fleet, Declared(reference="c")) == {"a": ODD, "b": ODD, "c": AGREES}
    down = Fleet((Member("a", None, "cannot reach vLLM"), Member("b", OBSERVED)))
    judged = decide(down, Declared(reference="a"))
    assert judged["a"].outcome == ODD and "replica a was not observed: cannot reach vLLM" in judged["a"].message
    assert judged["b"].outcome == UNDECIDED
    assert "the declared reference a (fleet.reference) was not observed" in judged["b"].message


def test_an_upgrade_is_compared_older_to_newer_whichever_replica_is_judged():
    newer = observation(vllm_version="0.32.0", routes=[*ROUTES, "POST /v1/responses"])
    fleet = Fleet((Member("new", newer), Member("old-1", OBSERVED), Member("old-2", OBSERVED)))
    upgrade = Declared(allowed_versions=("0.31.0", "0.32.0"))
    assert outcomes(fleet, upgrade) == {"new": AGREES, "old-1": AGREES, "old-2": AGREES}
    third = Fleet((*fleet.members, Member("stale", observation(vllm_version="0.30.1"))))
    judged = decide(third, upgrade)
    assert judged["stale"].outcome == ODD
    assert "vLLM 0.30.1, outside fleet.allowed_versions ['0.31.0', '0.32.0']" in judged["stale"].message
