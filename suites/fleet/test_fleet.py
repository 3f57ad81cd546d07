"""A fleet's replicas answer, and serve alike: one test per replica, the first one included.

Claimed by a run with more than one replica (--vllm-url given more than
once, or --vllm-fleet=FILE). Every replica is observed once at session start
(the capture of the profile_diff feature) and compared with the others.
Which side of a split is wrong is decided, not taken from the order of the
URLs: by fleet.reference when declared, else by what the profile declares
(a replica that contradicts it is wrong), else by majority; the odd one out
fails, named, with its values beside the other side's; a tie fails every
tied replica (they certainly differ), saying that which side is wrong is
not known. docs/fleet.md.
"""

import pytest

from pytest_vllm_conformance import contract, each, undecided
from pytest_vllm_conformance.observed import replicas as fleet


@pytest.fixture(scope="module")
def decided(vllm_fleet, vllm_offline_expect):
    return fleet.decide(vllm_fleet, fleet.declared_by(vllm_offline_expect))


@contract("fleet.replicas_reached")
def test_replicas_reached(vllm_fleet, vllm_record, vllm_evidence):
    unreached = [member.problem for member in vllm_fleet.members if member.problem]
    vllm_evidence.judged(len(vllm_fleet.members), "replicas")
    vllm_record("replicas", ", ".join(member.name for member in vllm_fleet.members))
    assert not unreached, "replica(s) not reached:\n" + "\n".join(unreached)
    vllm_evidence.judged(len(vllm_fleet.members), "replicas")


@contract("fleet.replicas_agree")
@each("replica", fleet.fleet_replicas)
def test_replicas_agree(replica, decided, vllm_record, vllm_evidence):
    judgement = decided[replica.name]
    vllm_record("replica", replica.name)  # the skewed replica's own result fails with it
    vllm_record("fleet_judgement", judgement.outcome)
    if judgement.outcome == fleet.UNDECIDED:
        undecided(judgement.message)
    assert judgement.outcome == fleet.AGREES, judgement.message
    vllm_evidence.judged(judgement.compared, "other replicas", missing="no other replica was observed")
