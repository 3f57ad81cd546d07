"""The quality suite's parts that need no server: the paired gate, greedy divergence,
stored baselines, generated long-context documents, and lm-eval's offline task loading."""

from __future__ import annotations

import json
import socket
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_vllm_conformance.protocol.greedy_answers import first_divergence
from suites.quality import baseline_file, greedy, long_context, paired, task_files
from suites.quality.runner import MetricResult, TaskResult, _task_result

# ---- the paired gate ------------------------------------------------------------


def items(values):
    return {str(index): float(value) for index, value in enumerate(values)}


def test_identical_answers_give_an_interval_around_zero_and_pass():
    same = items([1] * 8 + [0] * 32)
    comparison = paired.compare("acc", same, same, higher_is_better=True, tolerance=0.05, confidence=0.95)
    low, high = comparison.interval
    assert comparison.delta == 0 and low < 0 < high
    assert comparison.verdict != "worse"
    assert comparison.method == "Newcombe paired score interval"


def test_a_set_both_sides_score_zero_on_is_wide_not_certain():
    zeros = items([0] * 40)
    comparison = paired.compare("exact_match", zeros, zeros, higher_is_better=True, tolerance=0.05, confidence=0.95)
    assert comparison.interval == pytest.approx((-0.0876, 0.0876), abs=1e-3)
    # Wide, and at the floor on both sides: the task cannot discriminate, whatever the interval.
    assert comparison.verdict == "underpowered" and comparison.cannot_discriminate


def test_a_collapse_on_eight_items_is_shown_worse():
    comparison = paired.compare(
        "exact_match", items([0] * 8), items([1] * 8), higher_is_better=True, tolerance=0.05, confidence=0.95
    )
    assert comparison.verdict == "worse"
    assert comparison.interval[1] < -0.05
    text = str(comparison)
    for part in ("target 0.0000", "baseline 1.0000", "delta -1.0000", "95% interval [", "8 paired items", "worse"):
        assert part in text


@pytest.mark.parametrize(
    "table, expected",
    [
        # The paired 2x2 examples of Fagerland, Lydersen & Laake, Statistical Analysis of Contingency Tables,
        # ch. 8 (Bentur et al. 2009; Cavo et al. 2012), pinned; the same square-and-add formula as the R
        # package contingencytables' Newcombe_square_and_add_CI_paired_2x2.
        ((1, 1, 7, 12), (-0.5069, -0.0256)),
        ((59, 6, 16, 80), (-0.1186, -0.0046)),
    ],
)
def test_newcombe_interval_on_published_tables(table, expected):
    assert paired.newcombe_paired_interval(*table, confidence=0.95) == pytest.approx(expected, abs=1e-4)


def test_concordant_items_narrow_the_interval():
    # Same marginal scores; paired outcomes that agree give a far narrower interval than ones that do not.
    agreeing = paired.newcombe_paired_interval(both=20, only_target=2, only_baseline=2, neither=16, confidence=0.95)
    crossing = paired.newcombe_paired_interval(both=0, only_target=22, only_baseline=22, neither=0, confidence=0.95)
    assert agreeing[1] - agreeing[0] < (crossing[1] - crossing[0]) / 2


def test_the_interval_covers_the_true_difference_about_as_often_as_it_claims():
    rng = np.random.default_rng(7)
    covered, runs, n = 0, 2000, 40
    # Target right on 60 % of items, baseline on 50 %, the two correlated through shared items.
    for _ in range(runs):
        shared = rng.random(n) < 0.5
        target = np.where(rng.random(n) < 0.8, shared, rng.random(n) < 0.9)
        baseline = shared
        truth = 0.8 * 0.5 + 0.2 * 0.9 - 0.5
        both = int(np.sum(target & baseline))
        only_target = int(np.sum(target & ~baseline))
        only_baseline = int(np.sum(~target & baseline))
        low, high = paired.newcombe_paired_interval(
            both, only_target, only_baseline, n - both - only_target - only_baseline, 0.95
        )
        covered += low <= truth <= high
    assert 0.92 <= covered / runs <= 0.99


def test_lower_is_better_metrics_fail_upwards():
    comparison = paired.compare(
        "error_rate", items([1] * 10), items([0] * 10), higher_is_better=False, tolerance=0.05, confidence=0.95
    )
    assert comparison.verdict == "worse"


def test_non_binary_items_use_a_paired_bootstrap():
    target = items([0.9, 0.1, 0.45, 0.7, 0.3] * 40)
    comparison = paired.compare("f1", target, target, higher_is_better=True, tolerance=0.05, confidence=0.95)
    assert comparison.method.startswith("paired bootstrap")
    assert comparison.interval == (0.0, 0.0) and comparison.verdict == "not worse"
    # Items that could each fall by 0.1 at most cannot take the mean 0.05 below: no drop would fail the gate.
    narrow = items([0.5, 0.4, 0.45, 0.5, 0.42] * 6)
    blind = paired.compare("f1", narrow, narrow, higher_is_better=True, tolerance=0.05, confidence=0.95)
    assert blind.detectable_drop is None and blind.verdict == "underpowered"


def test_only_items_both_sides_answered_are_paired():
    comparison = paired.compare(
        "acc",
        {"0": 1.0, "1": 0.0, "2": 1.0},
        {"1": 0.0, "2": 1.0, "3": 0.0},
        higher_is_better=True,
        tolerance=0.05,
        confidence=0.95,
    )
    assert comparison.items == 2


# ---- greedy divergence ------------------------------------------------------------


def test_first_divergence_names_the_first_differing_position():
    assert first_divergence([1, 2, 3, 4], [1, 2, 9, 4], compared=4) == 2
    assert first_divergence([1, 2, 3, 4], [1, 2, 3, 4, 5], compared=4) is None
    assert first_divergence([1, 2], [1, 2, 3], compared=3) == 2  # a shorter answer differs where it stops


def test_divergence_message_shows_both_sides_at_the_position():
    found = greedy.compare(
        [greedy.Continuation([7], [5, 6, 7, 8])], [greedy.Continuation([7], [5, 9, 7, 8])], 4, ("hello world",)
    )
    assert str(found[0]) == (
        "prompt 0 'hello world': first diverging generated token at position 1 of 4: "
        "target [6, 7, 8] vs baseline [9, 7, 8] (no top-k logprobs on both sides: not judged as a near-tie)"
    )


# ---- stored baselines -------------------------------------------------------------


def sample_result():
    metric = MetricResult("acc,none", True, 0.5, {"0": 1.0, "1": 0.0})
    return TaskResult("vllm_conformance_multiple_choice", "completions", {"acc,none": metric}, {"0": "aa", "1": "bb"})


def test_a_saved_baseline_reads_back_equal(tmp_path):
    saved = baseline_file.BaselineFile(
        server={"url": "http://old:8000", "vllm_version": "0.29.0", "model": "m", "max_model_len": 512},
        runs={"vllm_conformance_multiple_choice@completions": sample_result()},
        greedy=[greedy.Continuation([1, 2], [3, 4])],
        greedy_max_tokens=2,
    )
    path = saved.save(tmp_path / "baseline.json")
    loaded = baseline_file.BaselineFile.load(path)
    assert loaded.runs == saved.runs
    assert loaded.greedy == saved.greedy and loaded.greedy_max_tokens == 2
    assert loaded.label == f"{path}: vLLM 0.29.0, model 'm'"
    data = json.loads(path.read_text())
    assert data["format"] == baseline_file.FORMAT and data["server"]["vllm_version"] == "0.29.0"


@pytest.mark.parametrize(
    "content, problem",
    [
        ("{", "not JSON"),
        ('{"format": "other"}', "not a quality baseline"),
        (json.dumps({"format": baseline_file.FORMAT, "format_version": 99}), "format_version 99"),
    ],
)
def test_an_unusable_baseline_file_is_named_with_its_problem(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(baseline_file.BaselineFileError, match=problem):
        baseline_file.BaselineFile.load(path)


# ---- lm-eval results to per-item values -------------------------------------------


def test_per_item_values_come_from_lm_eval_samples():
    results = {
        "samples": {
            "t": [
                {
                    "doc_id": 0,
                    "filter": "none",
                    "metrics": ["acc", "bleu"],
                    "acc": 1.0,
                    "bleu": ("ref", "pred"),
                    "prompt_hash": "h0",
                },
                {
                    "doc_id": 1,
                    "filter": "none",
                    "metrics": ["acc", "bleu"],
                    "acc": 0.0,
                    "bleu": ("ref", "pred"),
                    "prompt_hash": "h1",
                },
            ]
        },
        "higher_is_better": {"t": {"acc": True, "bleu": True}},
        "configs": {
            "t": {"metric_list": [{"metric": "acc", "aggregation": "mean"}, {"metric": "bleu", "aggregation": "bleu"}]}
        },
        "results": {"t": {"acc,none": 0.5}},
    }
    result = _task_result("t", "completions", results)
    assert result.metrics["acc,none"].items == {"0": 1.0, "1": 0.0}
    assert result.metrics["acc,none"].score == 0.5
    assert result.not_comparable == ("bleu,none",)
    assert result.prompt_hashes == {"0": "h0", "1": "h1"}


# ---- long-context documents ---------------------------------------------------------


class WordTokenizer:
    """A /tokenize that counts whitespace-separated words, for sizing tests."""

    def __init__(self):
        self.calls = 0

    def post(self, path, body, **kw):
        self.calls += 1
        count = len(body["prompt"].split())
        payload = json.dumps({"count": count, "tokens": list(range(count))}).encode()
        return SimpleNamespace(status=200, json_or_none=lambda: json.loads(payload), describe=lambda: "200")


@pytest.mark.parametrize("percent", [25, 50, 90, 100])
def test_documents_fill_the_fraction_of_the_context(percent):
    tokenizer = WordTokenizer()
    sizing = long_context.Sizing(percent, 4096)
    docs = long_context.documents(tokenizer, "m", sizing)
    assert len(docs) == long_context.ITEMS_PER_LENGTH
    for doc in docs:
        prompt = f"{doc['context']}\n\nQuestion: {doc['question']}\nAnswer:"
        assert len(prompt.split()) == doc["prompt_tokens"]
        assert sizing.prompt_budget - 1 <= doc["prompt_tokens"] <= sizing.prompt_budget
        assert f"is {doc['answer']}." in doc["context"]
    assert [doc["depth"] for doc in docs] == sorted(doc["depth"] for doc in docs)
    assert tokenizer.calls < 20 * len(docs)


def test_documents_are_the_same_in_every_run():
    sizing = long_context.Sizing(50, 2048)
    assert long_context.documents(WordTokenizer(), "m", sizing) == long_context.documents(WordTokenizer(), "m", sizing)


def test_too_small_a_context_is_named():
    with pytest.raises(long_context.LongContextUnavailable, match="too few"):
        long_context.documents(WordTokenizer(), "m", long_context.Sizing(25, 64))


# ---- lm-eval loads the shipped tasks offline --------------------------------------------


@pytest.fixture
def loopback_only(monkeypatch):
    """Any connection or name lookup outside this machine fails the test."""
    attempts = []
    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect

    def getaddrinfo(host, *args, **kwargs):
        if host not in ("localhost", "127.0.0.1", "::1", None):
            attempts.append(host)
            raise OSError(f"network blocked in this test: {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1"):
            attempts.append(address)
            raise OSError(f"network blocked in this test: {address}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    return attempts


def test_shipped_tasks_load_offline_with_lm_evals_own_metrics(tmp_path, loopback_only):
    pytest.importorskip("lm_eval", reason="needs the quality extra")
    from suites.quality.runner import task_manager

    run_dir = task_files.write_shipped(tmp_path / "tasks", 60)
    task_files.write_long_context(run_dir, 25, [{"context": "x", "question": "q", "answer": "1"}])
    names = [*task_files.SHIPPED, task_files.long_context_task(25)]
    manager = task_manager([run_dir], names)
    loaded = manager.load(names)["tasks"]
    assert sorted(loaded) == sorted(names)
    short = loaded[task_files.SHORT_ANSWER]
    assert len(list(short.test_docs())) == 60
    assert len(list(loaded[task_files.MULTIPLE_CHOICE].test_docs())) == 60
    assert short.config.dataset_kwargs["data_files"]["test"].startswith("/")
    from lm_eval.api.registry import get_metric

    for metric in ("exact_match", "acc"):
        assert get_metric(metric).__module__ == "lm_eval.api.metrics"  # no `evaluate.load` from the Hub
    assert "evaluate" not in sys.modules or loopback_only == []
    assert loopback_only == []
    assert (run_dir / "datasets-cache").is_dir()  # the datasets cache stays in the run's directory


def test_lm_eval_gets_our_key_as_a_header_and_never_openai_api_key(monkeypatch):
    pytest.importorskip("lm_eval", reason="needs the quality extra")
    from pytest_vllm_conformance.connection.secrets import Secret
    from suites.quality.runner import Endpoint, language_model

    monkeypatch.setenv("OPENAI_API_KEY", "sk-someone-elses")
    keyless = language_model(Endpoint("target", "http://127.0.0.1:1", "m", max_model_len=512), "chat", client=None)
    assert "sk-someone-elses" not in json.dumps(keyless.header)
    keyed = language_model(
        Endpoint("target", "http://127.0.0.1:1", "m", api_key=Secret("sk-ours")), "chat", client=None
    )
    assert keyed.header == {"Authorization": "Bearer sk-ours"}
    assert keyless.max_length == 511  # lm-eval keeps max_length - 1: the server's 512, less one for generation
