"""The CPU watermark's two halves, without a server (fixtures/cpu_watermark/).

The integration tests prove it end to end; these pin what a short run on a
tiny model never exercises: the persistent batch being reordered (vLLM's
removed / added / moved updates), repeated contexts, greedy rows, and the
middleware's rewrite of bodies it must and must not touch.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
logits_processor = pytest.importorskip("vllm.v1.sample.logits_processor")

from fixtures import cpu_watermark  # noqa: E402
from fixtures.cpu_watermark.processor import GumbelWatermarkProcessor  # noqa: E402
from pytest_vllm_conformance.watermark import GumbelDetector  # noqa: E402

KEY = 0x51DE_C0DE_1234_5678
VOCAB = 512
BatchUpdate = logits_processor.BatchUpdate
SWAP = logits_processor.MoveDirectionality.SWAP
ONE_WAY = logits_processor.MoveDirectionality.UNIDIRECTIONAL


class Params:
    """The two SamplingParams fields the processor reads."""

    def __init__(self, temperature=1.0, extra_args=None):
        self.temperature = temperature
        self.extra_args = extra_args


@pytest.fixture
def processor(monkeypatch):
    monkeypatch.setenv(cpu_watermark.KEY_ENV, hex(KEY))
    monkeypatch.setenv(cpu_watermark.CONTEXT_WIDTH_ENV, "4")
    return GumbelWatermarkProcessor(None, torch.device("cpu"), False)


def update(size, removed=(), added=(), moved=()):
    return BatchUpdate(batch_size=size, removed=list(removed), added=list(added), moved=list(moved))


def generate(processor, outputs, steps, rng):
    """Run ``steps`` decoding steps on random logits; each row's pick is appended to its output."""
    for _ in range(steps):
        logits = torch.from_numpy(rng.normal(size=(len(outputs), VOCAB)).astype(np.float32))
        processor.update_state(None)
        processed = processor.apply(logits.clone())
        for row, output in enumerate(outputs):
            finite = torch.isfinite(processed[row]).nonzero().flatten()
            # A watermarked row leaves one token; others are sampled as vLLM would, but from the
            # test's own seeded generator: torch's global one made an unwatermarked row look
            # watermarked about once in 300 runs.
            if len(finite) == 1:
                pick = int(finite[0])
            else:
                probabilities = torch.softmax(processed[row].double(), -1).numpy()
                pick = int(rng.choice(len(probabilities), p=probabilities / probabilities.sum()))
            output.append(pick)


def test_watermarked_rows_follow_their_requests_through_batch_moves(processor):
    rng = np.random.default_rng(0)
    detector = GumbelDetector(KEY, context_width=4)
    marked, opted_out, greedy = [], [], []
    processor.update_state(
        update(
            3,
            added=[
                (0, Params(), [1, 2], marked),
                (1, Params(extra_args={"watermarking": 0}), [1, 2], opted_out),
                (2, Params(temperature=0.0), [1, 2], greedy),
            ],
        )
    )
    generate(processor, [marked, opted_out, greedy], 40, rng)
    # The watermarked request swaps places with the opted-out one, then moves one way.
    processor.update_state(update(3, moved=[(0, 1, SWAP)]))
    generate(processor, [opted_out, marked, greedy], 40, rng)
    processor.update_state(update(2, removed=[2], moved=[(1, 2, ONE_WAY)]))
    assert set(processor.requests) == {2}
    processor.update_state(update(2, moved=[(2, 1, ONE_WAY)]))
    generate(processor, [opted_out, marked], 40, rng)

    assert detector.detect(marked).p_value < 1e-6
    assert detector.detect(opted_out).p_value > 1e-3
    assert set(processor.requests) == {1} and processor.requests[1].output is marked


def test_a_repeated_context_is_sampled_normally(processor):
    output = [7, 7, 7, 7, 7]  # the context (7, 7, 7, 7) has been seen at position 4
    processor.update_state(update(1, added=[(0, Params(), [1], output)]))
    logits = torch.zeros(1, VOCAB)
    assert torch.isfinite(processor.apply(logits.clone())).all()
    output.append(8)  # a new context: watermarked again
    assert torch.isfinite(processor.apply(logits.clone())).sum() == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"prompt": "x", "watermarking": False},
            {"prompt": "x", "watermarking": False, "vllm_xargs": {"watermarking": 0}},
        ),
        (
            {"watermarking": True, "vllm_xargs": {"a": "b"}},
            {"watermarking": True, "vllm_xargs": {"a": "b", "watermarking": 1}},
        ),
        (
            {"sampling_params": {"watermarking": False}},
            {"sampling_params": {"watermarking": False, "extra_args": {"watermarking": 0}}},
        ),
    ],
)
def test_the_opt_out_is_copied_where_the_processor_reads_it(body, expected):
    assert json.loads(cpu_watermark.rewrite_body(json.dumps(body).encode())) == expected


@pytest.mark.parametrize(
    "body", [b'{"prompt": "x"}', b'{"watermarking": "maybe"}', b'{"watermarking": null}', b"[1]", b"not json"]
)
def test_bodies_without_a_boolean_opt_out_are_left_alone(body):
    # vLLM validates "maybe" itself (400); absent or null means watermarked.
    assert cpu_watermark.rewrite_body(body) is None


def test_the_middleware_recomputes_content_length():
    seen = {}

    async def app(scope, receive, send):
        seen["headers"] = dict(scope["headers"])
        seen["body"] = (await receive())["body"]

    body = json.dumps({"prompt": "x", "watermarking": False}).encode()
    chunks = [
        {"type": "http.request", "body": body[:10], "more_body": True},
        {"type": "http.request", "body": body[10:], "more_body": False},
    ]

    async def receive():
        return chunks.pop(0)

    scope = {
        "type": "http",
        "method": "POST",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
    }
    asyncio.run(cpu_watermark.WatermarkOptOutToXargs(app)(scope, receive, None))
    assert json.loads(seen["body"])["vllm_xargs"] == {"watermarking": 0}
    assert seen["headers"][b"content-length"] == str(len(seen["body"])).encode()
