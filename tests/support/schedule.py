"""In what order the groups of server tests run: derived from what each test declares, never a hand-kept list.

A test declares the pool's servers it uses with ``@pytest.mark.servers("plain",
"hardened")`` (its module's ``pytestmark``, or the test's own, which wins). A
module's tests run as one group, except a test that needs a server its module
does not declare, or declares none while its module does (the embedded
server's test): those go apart, one group per module and declaration, so that
the module's group does not hold a server only one test needs.

``order`` sequences the groups as the pool would fill, at most ``room`` servers
alive, a server no later group wants stopped first, else the least recently
used: next comes the group that starts the fewest servers and stops the fewest
that a later group still wants, so that every group using the servers already
up runs before one that starts another, and a server starts once where it
can. Ties go to the group that is the last to want a server (what is open is
finished before more is opened), then to the group whose new servers the most
groups left want (the busiest servers start first and stay up), then to a
quiet group (QUIET_TESTS: it runs while nothing starts beside it), then to the
shortest by measured cost (``COSTS_FILE``), so the longest group runs last
before the next start and hides it. While a group runs, the servers of the groups after it start in the
free slots (``tests/conftest.py``'s ``pytest_runtest_call``), nearest group
first. A new module needs no entry anywhere: its declaration places it.
``tests/unit/test_schedule.py`` fails when a server test declares no servers,
a group needs more servers than the pool keeps, or the order starts a server
twice.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path

# The one test that starts a server of its own (the plugin's embedded server): it takes one of the
# three slots while it runs.
EMBEDDED_SERVER_TEST = (
    "integration/test_reports_on_real_vllm.py::test_embedded_server_is_started_stopped_and_never_holds_the_key"
)
# The marker a server test declares its servers with (names of fixtures/server_specs.py's specs).
SERVERS_MARKER = "servers"
# How long each group took on a whole run, in seconds (``VLLM_CONFORMANCE_TEST_COSTS_OUT=path`` writes them:
# tests/conftest.py). A group not measured yet counts as free; the order stays valid, only less tuned.
COSTS_FILE = Path(__file__).with_name("group_costs.json")

# Tests whose verdicts depend on the server's speed (whole-suite runs pinned verdict by verdict, which include
# validation_bounds.answered_fast; admission timing its refusals): they run alone on the machine
# with no server starting beside them. (The xdist comparison is not one: its markers hold no timed check.)
QUIET_TESTS = (
    "integration/test_suites_on_real_vllm.py",
    "integration/test_operational_suites.py",
    "integration/test_serving_on_real_vllm.py",
    "integration/test_capacity_on_real_vllm.py",
)

Identity = Callable[[str], Hashable]


def under(nodeid: str, prefix: str) -> bool:
    return nodeid == prefix or nodeid.startswith((prefix + "::", prefix + "["))


def below_tests(nodeid: str) -> str:
    """A node id below tests/, as the groups and QUIET_TESTS name it."""
    return nodeid.split("tests/", 1)[-1]


def is_quiet(nodeid: str) -> bool:
    return any(under(below_tests(nodeid), prefix) for prefix in QUIET_TESTS)


def group_key(
    module: str, module_servers: Sequence[str], own: Sequence[str], same_server: Identity = lambda name: name
) -> str:
    """The group of a test of ``module`` (below tests/) that declares ``own``, its module ``module_servers``."""
    mine, its_module = {same_server(name) for name in own}, {same_server(name) for name in module_servers}
    if mine <= its_module and (own or not module_servers):
        return module
    return f"{module}::[{', '.join(own) or 'no pool server'}]"


def servers_by_group(declared: Iterable[tuple[str, Sequence[str]]]) -> dict[str, tuple[str, ...]]:
    """Each group's servers: what its tests declare, (group, servers) per test, in the order first declared."""
    found: dict[str, dict[str, None]] = {}
    for group, names in declared:
        found.setdefault(group, {}).update(dict.fromkeys(names))
    return {group: tuple(names) for group, names in found.items()}


def measured_costs(path: Path = COSTS_FILE) -> dict[str, float]:
    return json.loads(path.read_text()) if path.exists() else {}


def order(
    servers: Mapping[str, Sequence[str]],
    same_server: Identity = lambda name: name,
    costs: Mapping[str, float] | None = None,
    room: int = 3,
) -> list[str]:
    """The groups in the order they run (see the module's docstring)."""
    costs = costs or {}
    identities = {group: list(dict.fromkeys(map(same_server, names))) for group, names in servers.items()}
    wanted_by = Counter(identity for ids in identities.values() for identity in ids)
    alive: list[Hashable] = []
    left, ordered = sorted(servers), []
    while left:
        rank = {}
        for group in left:
            # Fewest starts and stops of a server still wanted; then a group that is the last to want a server up
            # (finishing what is open keeps it from being stopped early); then the busiest new servers.
            _, started, lost = _run(alive, identities[group], wanted_by, room)
            finished = sum(wanted_by[identity] == 1 for identity in identities[group] if identity not in started)
            busiest = sum(wanted_by[identity] for identity in started)
            quiet, cost = is_quiet(group), costs.get(group, 0.0)
            rank[group] = (len(started) + len(lost), -finished, -busiest, not quiet, cost, group)
        group = min(left, key=rank.__getitem__)
        left.remove(group)
        ordered.append(group)
        alive, _, _ = _run(alive, identities[group], wanted_by, room)
        wanted_by.subtract(identities[group])
    return ordered


def starts(servers: Mapping[str, Sequence[str]], ordered: Sequence[str], same_server: Identity, room: int) -> Counter:
    """How often each server starts when the groups run in ``ordered``, at most ``room`` alive."""
    identities = {group: list(dict.fromkeys(map(same_server, servers[group]))) for group in ordered}
    wanted_by = Counter(identity for group in ordered for identity in identities[group])
    alive: list[Hashable] = []
    started: Counter = Counter()
    for group in ordered:
        alive, new, _ = _run(alive, identities[group], wanted_by, room)
        wanted_by.subtract(identities[group])
        started.update(new)
    return started


def _run(
    alive: list[Hashable], needed: list[Hashable], wanted_by: Counter, room: int
) -> tuple[list[Hashable], list[Hashable], list[Hashable]]:
    """One group run on the pool, making room as ServerPool.prefetch does: the servers alive after it (the least
    recently used first), those it started, and those it stopped that a later group still wants (``wanted_by``: how
    many groups from this one on want each)."""
    started = [identity for identity in needed if identity not in alive]
    after = [identity for identity in alive if identity not in needed] + needed
    still_wanted = Counter({identity: wanted_by[identity] - (identity in needed) for identity in after})
    lost = []
    while len(after) > room:  # a server no later group wants goes first, then the least recently used
        victim = next((i for i in after if still_wanted[i] <= 0 and i not in needed), after[0])
        after.remove(victim)
        if still_wanted[victim] > 0:
            lost.append(victim)
    return after, started, lost


def servers_wanted_soonest(
    servers: Mapping[str, Sequence[str]],
    group: str,
    later: Sequence[str],
    room: int,
    same_server: Identity = lambda name: name,
) -> list[str]:
    """The group's servers, then those of the groups after it in order, up to ``room`` servers.

    It stops at the first server that does not fit: a nearer group's server
    is never passed over for a farther one's. ``same_server`` maps a name to
    the server it starts: two names of one server take one slot.
    """
    names = list(servers.get(group, ()))
    started = {same_server(name) for name in names}
    for upcoming in later:
        for name in servers.get(upcoming, ()):
            if same_server(name) not in started:
                if len(started) >= room:
                    return names
                started.add(same_server(name))
                names.append(name)
    return names
