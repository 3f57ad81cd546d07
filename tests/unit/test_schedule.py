"""The server tests' schedule names real tests, every server test has a group, and no group needs more than the pool."""

import os
import subprocess
import sys

import pytest

from tests.conftest import OPT_IN_PROOFS, REPO
from tests.support import schedule


@pytest.fixture(scope="module")
def server_tests() -> list[str]:
    """Every server test's node id below tests/, opt-in proofs included, as one process collects them."""
    env = {**os.environ, **dict.fromkeys(OPT_IN_PROOFS.values(), "1")}
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/integration"]
        + ["tests/faults"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    return [schedule.below_tests(line) for line in listed.stdout.splitlines() if "::" in line]


def test_every_group_names_a_test(server_tests):
    empty = [group.tests for group in schedule.GROUPS if not any(schedule.under(t, group.tests) for t in server_tests)]
    assert not empty, f"entries of tests/support/schedule.py that name no test (renamed or removed?): {empty}"


def test_every_server_test_is_in_a_group(server_tests):
    assert server_tests
    lost = [test for test in server_tests if schedule.group_of(test) is None]
    assert not lost, f"server tests in no group of tests/support/schedule.py (they would run last): {lost}"


def test_no_group_needs_more_servers_than_the_pool_keeps():
    wider = [group.tests for group in schedule.GROUPS if len(group.servers) > 3]
    assert not wider, f"groups that need more than three servers alive at once: {wider}"
