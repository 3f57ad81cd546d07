"""The protocol floor reads an answer one way, whether it comes whole or chunk by chunk."""

from __future__ import annotations

from pytest_vllm_conformance.protocol import generation_routes, sse
from pytest_vllm_conformance.protocol.prometheus import family_names

BODY = (
    ': keep-alive\r\n\r\ndata: {"choices": [{"text": "caf\u00e9"}]}\r\n\r\n'
    'data: {"choices": [], "usage": {"completion_tokens": 1}}\n\ndata: [DONE]\n\n'
).encode()


def test_the_reader_fed_byte_by_byte_gives_the_events_parse_gives():
    reader = sse.Reader()
    fed = [event for byte in range(len(BODY)) for event in reader.feed(BODY[byte : byte + 1])]
    whole = sse.parse(BODY)
    assert [(e.number, e.data, e.payload) for e in fed] == [(e.number, e.data, e.payload) for e in whole.events]
    assert fed[0].payload["choices"][0]["text"] == "caf\u00e9"  # a character split across chunks stays one
    assert reader.stream.problems == whole.problems == []


def test_each_event_is_stamped_with_the_chunk_that_completed_it_and_a_keep_alive_is_no_event():
    reader = sse.Reader()
    assert reader.feed(b": keep-alive\n\n") == []
    assert reader.feed(b'data: {"choices": []}') == []  # not whole yet
    (event,) = reader.feed(b"\n\n")
    assert event.arrived is not None and event.payload == {"choices": []}


def test_a_page_cut_at_the_cap_names_the_families_before_the_cut():
    page = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n# TYPE vllm:cu"
    assert family_names(page, cut=True) == ["vllm:num_requests_running"]


def test_each_generation_route_reads_its_own_answer_text():
    answers = {
        generation_routes.COMPLETIONS: {"choices": [{"text": "a"}]},
        generation_routes.CHAT: {"choices": [{"message": {"content": "a"}}]},
        generation_routes.RESPONSES: {"output": [{"content": [{"type": "output_text", "text": "a"}]}]},
        generation_routes.MESSAGES: {"content": [{"type": "text", "text": "a"}]},
    }
    for route, answer in answers.items():
        assert route.text(answer) == "a", route
        assert route.text({"unrelated": True}) is None, route
