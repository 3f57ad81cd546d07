"""A fleet's replicas answer, and serve alike: one test per replica besides the reference.

Claimed by a run with more than one replica (--vllm-url given more than
once, or --vllm-fleet=FILE). Every replica is observed once at session start
(the capture of the profile_diff feature); each is compared with the
reference (the profile's fleet.reference, else the first replica). A skewed
replica fails, named, with each differing value of the reference and of the
replica side by side. docs/fleet.md.
"""

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.features import fleet


@contract("fleet.replicas_reached")
def test_replicas_reached(vllm_fleet, vllm_record, vllm_evidence):
    unreached = [member.problem for member in vllm_fleet.members if member.problem]
    vllm_evidence.judged(len(vllm_fleet.members), "replicas")
    vllm_record("replicas", ", ".join(member.name for member in vllm_fleet.members))
    assert not unreached, "replica(s) not reached:\n" + "\n".join(unreached)


@contract("fleet.replicas_agree")
@each("replica", fleet.fleet_replicas)
def test_replicas_agree(replica, vllm_fleet, vllm_offline_expect, vllm_record, vllm_evidence):
    names = tuple(member.name for member in vllm_fleet.members)
    reference = fleet.reference_name(names, vllm_offline_expect.declared("fleet", "reference").value)
    allowed = vllm_offline_expect.declared("fleet", "allowed_versions").value
    vllm_record("replica", replica.name)  # the skewed replica's own result fails with it
    vllm_record("reference", reference)
    for name in (reference, replica.name):
        member = vllm_fleet.member(name)
        assert member.observed is not None, f"replica {name} was not observed: {member.problem or 'no capture'}"
    outside = fleet.disallowed_versions(vllm_fleet, allowed, (reference, replica.name))
    assert not outside, f"version(s) outside fleet.allowed_versions {allowed}: {'; '.join(outside)}"
    ignore = vllm_offline_expect.declared("profile_diff", "ignore").value
    found = fleet.skew(vllm_fleet.member(reference).observed, vllm_fleet.member(replica.name).observed, allowed, ignore)
    vllm_record("differences", len(found))
    vllm_evidence.judged(1, "compared captures")
    assert not found, fleet.side_by_side(reference, replica.name, found)
