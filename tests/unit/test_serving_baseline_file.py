"""A saved serving run: what it keeps, what it refuses to be compared with."""

import json

import pytest

from suites.serving import figures
from suites.serving.loadgen import RequestTiming, Round
from suites.serving.saved_rounds import PerfFileError, PerfRecording, recording, refusal

WORKLOAD = {"prompt_tokens": 32, "output_tokens": 16, "concurrency": 8, "requests": 32}


def _round(at: float, rate_seconds: float) -> Round:
    timings = tuple(
        RequestTiming(
            started=at + i,
            ended=at + i + rate_seconds,
            status=200,
            token_times=[at + i + 0.1 * k for k in range(1, 17)],
            prompt_tokens=32,
            completion_tokens=16,
        )
        for i in range(4)
    )
    return Round(timings, at, at + 4 + rate_seconds)


def _saved(tmp_path, rounds=2):
    saving = recording(
        [_round(1000.0 * n, 2.0) for n in range(rounds)],
        version="0.32.0",
        model="tiny",
        url="http://old:8000",
        workload=WORKLOAD,
    )
    return PerfRecording.load(saving.save(tmp_path / "perf.json"))


def test_a_saving_keeps_each_request_timed_from_its_round_and_the_figures_it_gives(tmp_path):
    loaded = _saved(tmp_path)
    assert len(loaded.rounds) == 2
    assert loaded.server["vllm_version"] == "0.32.0" and loaded.workload == WORKLOAD
    first = loaded.rounds[1].timings[0]
    assert first.started == pytest.approx(0.0) and first.ttft == pytest.approx(0.1)
    assert figures.output_rates(loaded.rounds[0].timings) == pytest.approx([8.0] * 4)
    assert loaded.rounds[0].output_tokens_per_second == pytest.approx(64 / 6)
    assert "0.32.0" in loaded.label and "'tiny'" in loaded.label


def test_another_workload_or_model_is_refused_with_what_differs(tmp_path):
    loaded = _saved(tmp_path)
    assert refusal(loaded, "tiny", WORKLOAD, None) is None
    other = refusal(loaded, "tiny", {**WORKLOAD, "output_tokens": 64}, None)
    assert other and "another workload" in other and "output_tokens 16 saved, 64 now" in other
    model = refusal(loaded, "big", WORKLOAD, None)
    assert model and "--vllm-baseline-model=tiny" in model
    assert refusal(loaded, "big", WORKLOAD, "tiny") is None


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("not json", "not JSON"),
        (json.dumps({"format": "pytest-vllm-conformance quality baseline"}), "not a serving baseline"),
        (json.dumps({"format": "pytest-vllm-conformance serving baseline", "format_version": 9}), "format_version 9"),
        (json.dumps({"format": "pytest-vllm-conformance serving baseline", "format_version": 1}), "malformed"),
    ],
)
def test_a_file_that_is_not_a_serving_baseline_is_refused_by_name(tmp_path, content, says):
    path = tmp_path / "perf.json"
    path.write_text(content)
    with pytest.raises(PerfFileError, match=says) as raised:
        PerfRecording.load(path)
    assert str(path) in str(raised.value)
