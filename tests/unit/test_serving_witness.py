"""The witness's figures: AIPerf's JSON summary read (a real one, trimmed: fixtures/aiperf/), ours computed from
per-request timings alike, the two compared, and the line the serving report shows for --vllm-serving-witness."""

import json
from pathlib import Path

import pytest

from fixtures import loadgen_witness
from suites.serving import witness
from suites.serving.loadgen import RequestTiming
from suites.serving.witness import Figures, Slo

# AIPerf 0.13.0 against a tiny-llama 0.32 server, 64 requests at concurrency 8, 32 prompt and 64 output tokens,
# --goodput "time_to_first_token:500 inter_token_latency:100"; its machine paths removed, the figures as written.
SAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "aiperf" / "profile_export_aiperf.json"


def timing(started, first, last, tokens, error=None):
    t = RequestTiming(started=started, completion_tokens=tokens, prompt_tokens=32, error=error)
    t.token_times = [first, (first + last) / 2, last] if last > first else [first]
    t.ended = last
    return t


def test_a_real_aiperf_summary_gives_the_four_figures():
    figures = witness.read_aiperf(SAMPLE)
    assert figures.source == "AIPerf 0.13.0"
    assert figures.requests == 64
    assert figures.output_tokens_per_second == pytest.approx(1332.37, abs=0.01)
    assert figures.ttft_p50 == pytest.approx(0.0652991, rel=1e-6)
    assert figures.tpot_p50 == pytest.approx(0.00364855, rel=1e-5)
    assert figures.slo == Slo(0.5, 0.1)
    assert figures.good_share == 1.0
    assert figures.detail == "completions, streamed, concurrency 8, 32 prompt and 64 output tokens"
    assert figures.prompt_tokens == (32, 32) and figures.output_tokens == (64, 64)


def test_the_report_line_names_the_generator_the_figures_and_the_file():
    line = witness.witness_line(SAMPLE)
    assert line == (
        "witness AIPerf 0.13.0: output 1332.4 tokens/s, TTFT p50 65.3 ms, time per output token p50 3.65 ms, "
        "goodput 100% of requests within TTFT <= 500 ms and time per output token <= 100 ms "
        "(64 requests; completions, streamed, concurrency 8, 32 prompt and 64 output tokens), "
        "from profile_export_aiperf.json"
    )


def test_without_an_objective_no_goodput_is_claimed(tmp_path):
    data = json.loads(SAMPLE.read_text())
    data["input_config"].pop("slos")
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    figures = witness.read_aiperf(path)
    assert figures.slo is None and figures.good_share is None
    assert "goodput" not in witness.witness_line(path)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot be read"),
        ("not json", "is not JSON"),
        ('{"benchmarks": []}', "is not AIPerf's JSON summary"),
        ('{"aiperf_version": "0.13.0", "request_count": {"avg": 3}}', "has no output_token_throughput avg"),
        (
            '{"aiperf_version": "0.13.0", "request_count": {"avg": 3}, "output_token_throughput": {"avg": 9.5},'
            ' "time_to_first_token": {"unit": "tokens", "p50": 3}}',
            "gives time_to_first_token in 'tokens', not a unit of time",
        ),
        ('{"aiperf_version": "0.13.0", "request_count": {"avg": NaN}}', "has no request_count avg"),
    ],
)
def test_a_file_that_is_not_a_usable_summary_is_named_not_raised(tmp_path, content, says):
    path = tmp_path / "witness.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(witness.WitnessFileError, match=says):
        witness.read_aiperf(path)
    assert witness.witness_line(path).startswith(f"witness: --vllm-serving-witness witness.json {says}")


def test_an_oversized_file_is_not_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(witness, "MAX_FILE_BYTES", 10)
    path = tmp_path / "big.json"
    path.write_text(" " * 11)
    with pytest.raises(witness.WitnessFileError, match="larger than"):
        witness.read_aiperf(path)


def test_time_per_output_token_is_decode_time_over_the_tokens_after_the_first():
    # 17 tokens, the first at 0.1 s, the last at 0.9 s: 0.8 s over 16 tokens, however the reads folded them.
    assert witness.time_per_output_token(timing(0.0, 0.1, 0.9, 17)) == pytest.approx(0.05)
    assert witness.time_per_output_token(timing(0.0, 0.1, 0.1, 1)) is None
    assert witness.time_per_output_token(RequestTiming(started=0.0, completion_tokens=5)) is None


def test_our_figures_are_defined_as_aiperfs():
    slo = Slo(ttft_seconds=0.2, tpot_seconds=0.05)
    timings = [
        timing(0.0, 0.1, 0.9, 17),  # TTFT 0.1, TPOT 0.05: good
        timing(0.0, 0.3, 0.7, 17),  # TTFT 0.3: not good
        timing(0.5, 0.6, 2.2, 17),  # TTFT 0.1, TPOT 0.1: not good
        timing(0.5, 0.7, 1.5, 17, error="HTTP 500"),  # failed: counted as not good, in no other figure
    ]
    figures = witness.ours(timings, seconds=2.0, slo=slo)
    assert figures.output_tokens_per_second == pytest.approx(3 * 17 / 2.0)
    assert figures.ttft_p50 == pytest.approx(0.1)
    assert figures.tpot_p50 == pytest.approx(0.05)
    assert figures.good_share == pytest.approx(1 / 4)
    assert figures.requests == 4
    assert figures.prompt_tokens == (32, 32) and figures.output_tokens == (17, 17)


def test_the_objective_is_passed_to_aiperf_in_its_display_unit():
    assert Slo(0.0812, 0.00437).aiperf_goodput() == "time_to_first_token:81.2 inter_token_latency:4.37"
    command = loadgen_witness.command(
        "aiperf",
        "http://127.0.0.1:9",
        "tiny-llama",
        loadgen_witness.WitnessWorkload(32, 64, 8, 128, 8),
        Slo(0.0812, 0.00437),
        Path("out"),
        seed=3,
    )
    text = " ".join(command)
    for flags in [
        "--concurrency 8 --request-count 128",
        "--warmup-request-count 8",
        "--isl 32 --isl-stddev 0",
        "--osl 64 --osl-stddev 0",
        "--extra-inputs ignore_eos:true",
        "--goodput time_to_first_token:81.2 inter_token_latency:4.37",
        "--tokenizer tiny-llama",
    ]:
        assert flags in text


def test_the_tokenizer_folder_is_a_hub_cache_entry_of_its_own(tmp_path):
    model = tmp_path / "tiny-llama"
    model.mkdir()
    (model / "tokenizer.json").write_text("{}")
    cache = loadgen_witness.hub_cache_with(model, "tiny-llama", tmp_path / "hub")
    entry = cache / "models--tiny-llama"
    assert (entry / "refs" / "main").read_text() == "local"
    assert (entry / "snapshots" / "local" / "tokenizer.json").read_text() == "{}"


def figures(source, rate, ttft, tpot, share):
    return Figures(source, 64, rate, ttft, tpot, share, Slo(0.1, 0.005))


def test_agreement_is_the_median_over_pairs_and_a_disagreement_names_its_figure():
    pairs = [
        (figures("ours", 1000, 0.050, 0.0040, 0.50), figures("AIPerf", 1100, 0.045, 0.0041, 0.60)),
        (figures("ours", 800, 0.080, 0.0050, 0.30), figures("AIPerf", 400, 0.160, 0.0100, 0.90)),  # a noisy pair
        (figures("ours", 900, 0.060, 0.0045, 0.40), figures("AIPerf", 855, 0.063, 0.0045, 0.35)),
    ]
    agreement = witness.agreement(pairs)
    assert agreement.throughput == pytest.approx(0.95)
    assert agreement.ttft == pytest.approx(1.05)
    assert agreement.tpot == pytest.approx(1.025)
    assert agreement.goodput == pytest.approx(0.1)
    assert agreement.outside(tolerance=0.25, share_tolerance=0.2) == []
    outside = agreement.outside(tolerance=0.04, share_tolerance=0.05)
    assert [line.split(":")[0] for line in outside] == ["output throughput", "TTFT p50", "goodput"]
    assert "0.950" in outside[0] and "1 +- 0.04" in outside[0]


def test_a_witness_run_between_two_of_ours_is_compared_with_their_geometric_mean():
    before = Figures("ours", 64, 1000, 0.040, 0.004, 0.4, Slo(0.1, 0.005), prompt_tokens=(32, 32))
    after = Figures("ours", 64, 640, 0.090, 0.009, 0.8, Slo(0.1, 0.005), prompt_tokens=(32, 33))
    middle = witness.between(before, after)
    assert middle.output_tokens_per_second == pytest.approx(800)
    assert middle.ttft_p50 == pytest.approx(0.060)
    assert middle.tpot_p50 == pytest.approx(0.006)
    assert middle.good_share == pytest.approx(0.6)
    assert middle.prompt_tokens == (32, 33) and middle.requests == 128
