"""The server tests' schedule names real tests, every server test has a group, and no group needs more than the pool."""

import ast

import pytest

from tests.conftest import REPO
from tests.support import schedule

SERVER_TEST_DIRS = ("integration", "faults")


@pytest.fixture(scope="module")
def server_tests() -> list[str]:
    """Every server test's node id below tests/ (opt-in proofs included), read from the modules' source.

    Read, not collected: collecting the server tests imports every library they use (lm-eval among them), about
    30 s of the unit tests' time; the groups name modules and functions, never parameters.
    """
    found = []
    for folder in SERVER_TEST_DIRS:
        for path in sorted((REPO / "tests" / folder).glob("test_*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            found += [
                f"{folder}/{path.name}::{node.name}"
                for node in tree.body
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
            ]
    return found


def test_every_group_names_a_test(server_tests):
    empty = [group.tests for group in schedule.GROUPS if not any(schedule.under(t, group.tests) for t in server_tests)]
    assert not empty, f"entries of tests/support/schedule.py that name no test (renamed or removed?): {empty}"


def test_every_server_test_is_in_a_group(server_tests):
    assert len(server_tests) > 50
    lost = [test for test in server_tests if schedule.group_of(test) is None]
    assert not lost, f"server tests in no group of tests/support/schedule.py (they would run last): {lost}"


def test_no_group_needs_more_servers_than_the_pool_keeps():
    wider = [group.tests for group in schedule.GROUPS if len(group.servers) > 3]
    assert not wider, f"groups that need more than three servers alive at once: {wider}"
