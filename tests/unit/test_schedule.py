"""The server tests' order is derived from their declarations: every server test declares its servers, no group needs
more servers than the pool keeps, and the derived order starts each server once, a new module included."""

import ast

import pytest

from fixtures.server_specs import server_identities
from tests.conftest import REPO
from tests.support import schedule

SERVER_TEST_DIRS = ("integration", "faults")


def declared_servers(node: ast.expr) -> tuple[str, ...] | None:
    """The names of a ``pytest.mark.servers(...)`` call, or None when ``node`` is not one."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == schedule.SERVERS_MARKER
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "mark"
    ):
        return tuple(arg.value for arg in node.args if isinstance(arg, ast.Constant))
    return None


def module_servers(tree: ast.Module) -> tuple[str, ...] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            marks = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            for mark in marks:
                found = declared_servers(mark)
                if found is not None:
                    return found
    return None


@pytest.fixture(scope="module")
def server_tests() -> dict[str, tuple[tuple[str, ...] | None, tuple[str, ...] | None]]:
    """Every server test's node id below tests/ (opt-in proofs included) with its module's declared servers and its
    own (the module's where it declares none; None: none declared), read from the modules' source.

    Read, not collected: collecting the server tests imports every library they use (lm-eval among them), about
    30 s of the unit tests' time; a group is a module, or its tests apart, never a parameter.
    """
    found: dict[str, tuple[tuple[str, ...] | None, tuple[str, ...] | None]] = {}
    for folder in SERVER_TEST_DIRS:
        for path in sorted((REPO / "tests" / folder).glob("test_*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            in_module = module_servers(tree)
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                    own = [s for s in map(declared_servers, node.decorator_list) if s is not None]
                    found[f"{folder}/{path.name}::{node.name}"] = (in_module, own[0] if own else in_module)
    return found


@pytest.fixture(scope="module")
def same_server():
    identities = server_identities()
    return lambda name: identities.get(name, name)


def groups_of(server_tests, same_server) -> dict[str, tuple[str, ...]]:
    return schedule.servers_by_group(
        (schedule.group_key(test.split("::")[0], in_module or (), own or (), same_server), own or ())
        for test, (in_module, own) in server_tests.items()
    )


def test_every_server_test_declares_its_servers(server_tests):
    assert len(server_tests) > 50
    silent = [test for test, (_, servers) in server_tests.items() if servers is None]
    assert not silent, f"server tests without @pytest.mark.servers(...) (their servers would not start ahead): {silent}"


def test_every_declared_name_is_a_server_of_server_specs(server_tests):
    unknown = {name for _, own in server_tests.values() for name in own or ()} - set(server_identities())
    assert not unknown, f"@pytest.mark.servers names no server of fixtures/server_specs.py: {sorted(unknown)}"


def test_no_group_needs_more_servers_than_the_pool_keeps(server_tests, same_server):
    groups = groups_of(server_tests, same_server)
    wider = {group: servers for group, servers in groups.items() if len(set(map(same_server, servers))) > 3}
    assert not wider, f"groups that need more than three servers alive at once: {wider}"


def test_the_derived_order_starts_each_server_once(server_tests, same_server):
    groups = groups_of(server_tests, same_server)
    ordered = schedule.order(groups, same_server, schedule.measured_costs())
    assert sorted(ordered) == sorted(groups)
    again = {server: n for server, n in schedule.starts(groups, ordered, same_server, 3).items() if n > 1}
    assert not again, f"servers the derived order starts more than once with three alive: {again}\n{ordered}"


def test_a_new_module_is_placed_by_its_declaration_alone(server_tests, same_server):
    groups = groups_of(server_tests, same_server)
    groups["faults/test_a_new_fault.py"] = ("plain", "bounded")
    ordered = schedule.order(groups, same_server)
    assert "faults/test_a_new_fault.py" in ordered
    assert all(n == 1 for n in schedule.starts(groups, ordered, same_server, 3).values())


def test_a_test_goes_apart_only_for_a_server_its_module_lacks_or_for_none():
    module = "faults/test_x.py"
    one_seq = {"compiled": "one_seq"}.get
    assert schedule.group_key(module, ("plain", "one_seq"), ("plain",)) == module
    assert schedule.group_key(module, ("plain", "one_seq"), ("compiled",), lambda n: one_seq(n, n)) == module
    assert schedule.group_key(module, ("plain",), ("padding",)) == f"{module}::[padding]"
    assert schedule.group_key(module, ("hardened",), ()) == f"{module}::[no pool server]"
    assert schedule.group_key(module, (), ()) == module


def test_the_order_keeps_servers_up_and_puts_quiet_groups_first_among_equals():
    servers = {
        "faults/a.py": ("plain", "yarn"),
        "faults/b.py": ("plain",),
        "faults/c.py": ("yarn", "bounded"),
        "faults/d.py": (),
        schedule.QUIET_TESTS[0]: ("plain",),
    }
    ordered = schedule.order(servers, costs={"faults/b.py": 5.0})
    assert ordered == ["faults/d.py", schedule.QUIET_TESTS[0], "faults/b.py", "faults/a.py", "faults/c.py"]
    assert set(schedule.starts(servers, ordered, lambda n: n, 3).values()) == {1}


def test_the_servers_wanted_next_stop_at_the_first_that_does_not_fit():
    servers = {0: ("plain",), 1: ("plain", "hardened"), 2: ("yarn", "watermark"), 3: ("bounded",)}
    assert schedule.servers_wanted_soonest(servers, 0, [1, 2, 3], 3) == ["plain", "hardened", "yarn"]
    assert schedule.servers_wanted_soonest(servers, 0, [1, 2, 3], 2) == ["plain", "hardened"]
    assert schedule.servers_by_group([(1, ("a", "b")), (1, ("b", "c")), (2, ())]) == {1: ("a", "b", "c"), 2: ()}


def test_two_names_of_one_server_take_one_slot():
    # one_seq is also the compiled server: a group naming both leaves room for the next group's server.
    servers = {0: ("plain",), 1: ("plain", "one_seq", "compiled"), 2: ("plain", "short_context")}
    one_seq = {"compiled": "one_seq"}
    wanted = schedule.servers_wanted_soonest(servers, 0, [1, 2], 3, lambda name: one_seq.get(name, name))
    assert wanted == ["plain", "one_seq", "short_context"]
    assert schedule.servers_wanted_soonest(servers, 0, [1, 2], 3) == ["plain", "one_seq", "compiled"]
    assert server_identities()["compiled"] == server_identities()["one_seq"]


def test_a_declaration_is_read_from_the_module_and_a_test_s_own_wins():
    tree = ast.parse(
        'pytestmark = [pytest.mark.server, pytest.mark.servers("plain", "hardened")]\n'
        '@pytest.mark.servers("padding")\ndef test_a(): ...\n'
    )
    assert module_servers(tree) == ("plain", "hardened")
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert [declared_servers(d) for d in function.decorator_list] == [("padding",)]
    assert module_servers(ast.parse("pytestmark = pytest.mark.server\n")) is None
