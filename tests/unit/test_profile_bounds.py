"""A serving workload a run could never send is refused with the profile, not run until killed or out of memory."""

from __future__ import annotations

import pytest

from pytest_vllm_conformance.catalogue.serving_profile import ProfileError, load_profile


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("requests", 1_000_000_000_000, "serving.requests: 1000000000000 is greater than the maximum of 100000"),
        ("prompt_tokens", 1_000_000_000, "serving.prompt_tokens: 1000000000 is greater than the maximum of 1048576"),
        ("output_tokens", 10_000_000, "serving.output_tokens: 10000000 is greater than the maximum of 1048576"),
        ("warm_up_requests", 10**9, "serving.warm_up_requests: 1000000000 is greater than the maximum of 10000"),
    ],
)
def test_a_serving_count_past_what_a_run_can_send_is_refused(tmp_path, key, value, said):
    path = tmp_path / "profile.yaml"
    path.write_text(f"profile: 1\nname: huge\nserving:\n  concurrency: 2\n  {key}: {value}\n")
    with pytest.raises(ProfileError) as refused:
        load_profile(path)
    assert said in str(refused.value)
