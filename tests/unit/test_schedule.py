"""The server tests' schedule names real tests, every server test declares its servers and has a group, and no
group needs more servers than the pool keeps."""

import ast

import pytest

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
def server_tests() -> dict[str, tuple[str, ...] | None]:
    """Every server test's node id below tests/ (opt-in proofs included) with the servers it declares (None: none
    declared), read from the modules' source.

    Read, not collected: collecting the server tests imports every library they use (lm-eval among them), about
    30 s of the unit tests' time; the order names modules and functions, never parameters.
    """
    found: dict[str, tuple[str, ...] | None] = {}
    for folder in SERVER_TEST_DIRS:
        for path in sorted((REPO / "tests" / folder).glob("test_*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            in_module = module_servers(tree)
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                    own = [s for s in map(declared_servers, node.decorator_list) if s is not None]
                    found[f"{folder}/{path.name}::{node.name}"] = own[0] if own else in_module
    return found


def test_every_order_entry_names_a_test(server_tests):
    empty = [entry for entry in schedule.ORDER if not any(schedule.under(test, entry) for test in server_tests)]
    assert not empty, f"entries of tests/support/schedule.py that name no test (renamed or removed?): {empty}"


def test_every_server_test_is_in_a_group(server_tests):
    assert len(server_tests) > 50
    lost = [test for test in server_tests if schedule.group_of(test) is None]
    assert not lost, f"server tests in no group of tests/support/schedule.py (they would run last): {lost}"


def test_every_server_test_declares_its_servers(server_tests):
    silent = [test for test, servers in server_tests.items() if servers is None]
    assert not silent, f"server tests without @pytest.mark.servers(...) (their servers would not start ahead): {silent}"


def test_no_group_needs_more_servers_than_the_pool_keeps(server_tests):
    declared = [(schedule.group_of(test), servers or ()) for test, servers in server_tests.items()]
    groups = schedule.servers_by_group((group, servers) for group, servers in declared if group is not None)
    wider = {schedule.ORDER[group]: servers for group, servers in groups.items() if len(servers) > 3}
    assert not wider, f"groups that need more than three servers alive at once: {wider}"


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


def test_a_declaration_is_read_from_the_module_and_a_test_s_own_wins():
    tree = ast.parse(
        'pytestmark = [pytest.mark.server, pytest.mark.servers("plain", "hardened")]\n'
        '@pytest.mark.servers("padding")\ndef test_a(): ...\n'
    )
    assert module_servers(tree) == ("plain", "hardened")
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert [declared_servers(d) for d in function.decorator_list] == [("padding",)]
    assert module_servers(ast.parse("pytestmark = pytest.mark.server\n")) is None
