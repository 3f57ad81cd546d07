"""What a streamed chat or completions answer's events must carry: choices, finishes, roles, usage, logprobs.

The events are read by the protocol floor's SSE reader (``protocol/sse.py``);
here is what the wire suite asks of them.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from pytest_vllm_conformance.protocol.sse import Event, Stream


def finish_problems(stream: Stream) -> list[str]:
    """At least one choice is streamed, and each choice gets exactly one finish_reason.

    A stream without any choice (only ``data: [DONE]``, or only a usage
    chunk) gives a client nothing to read: it is not a well-framed empty answer.
    """
    finished: dict[int, list[int]] = {}
    for event in stream.chunks():
        for position, choice in enumerate(event.choices()):
            index = choice.get("index", position)
            finished.setdefault(index, [])
            if choice.get("finish_reason") is not None:
                finished[index].append(event.number)
    if not finished:
        return [
            f"no event carries a choice ({len(list(stream.chunks()))} JSON event(s) before [DONE]): "
            "the stream has no text and no finish_reason to read"
        ]
    problems = []
    for index, events in sorted(finished.items()):
        if len(events) != 1:
            where = f"events {', '.join(map(str, events))}" if events else "no event"
            problems.append(f"choice {index} finished {len(events)} times ($.choices[*].finish_reason set in {where})")
    return problems


def role_problems(stream: Stream) -> list[str]:
    """A chat choice's first delta carries the role, as clients build the message from it."""
    seen: set[int] = set()
    problems = []
    for event in stream.chunks():
        for position, choice in enumerate(event.choices()):
            index = choice.get("index", position)
            if index in seen:
                continue
            seen.add(index)
            delta = choice.get("delta")
            role = delta.get("role") if isinstance(delta, dict) else None
            if role != "assistant":
                problems.append(
                    f"event {event.number} $.choices[{position}].delta.role: choice {index}'s first delta carries "
                    f"role {role!r}, not 'assistant'"
                )
    return problems


def usage_problems(stream: Stream, *, asked: bool, max_tokens: int, tokens_streamed: int | None) -> list[str]:
    """With include_usage: exactly one usage chunk, choices [], last, adding up; without it: no usage at all."""
    carrying = [event for event in stream.chunks() if event.payload.get("usage") is not None]
    if not asked:
        return [f"event {e.number} $.usage: usage sent without stream_options.include_usage" for e in carrying]
    if len(carrying) != 1:
        numbers = ", ".join(str(e.number) for e in carrying) or "none"
        return [f"$.usage: expected exactly one usage chunk with stream_options.include_usage, got events {numbers}"]
    return _final_usage_problems(stream, carrying[0], max_tokens=max_tokens, tokens_streamed=tokens_streamed)


def _final_usage_problems(stream: Stream, event: Event, *, max_tokens: int, tokens_streamed: int | None) -> list[str]:
    """The usage chunk: choices [], the last before [DONE], counts that add up to what was streamed."""
    problems = []
    if event.payload.get("choices") != []:
        carried = len(event.choices())
        problems.append(f"event {event.number} $.choices: the usage chunk carries {carried} choice(s), not []")
    last = [e.number for e in stream.chunks()][-1]
    if event.number != last:
        problems.append(f"event {event.number} $.usage: the usage chunk is not the last before [DONE] (event {last})")
    counts = _counts(event)
    if isinstance(counts, str):
        return [*problems, counts]
    prompt, completion, total = counts
    if total != prompt + completion:
        problems.append(f"event {event.number} $.usage.total_tokens: {prompt} + {completion} != {total}")
    if not 0 < completion <= max_tokens:
        problems.append(f"event {event.number} $.usage.completion_tokens: {completion}, for max_tokens={max_tokens}")
    if tokens_streamed is not None and tokens_streamed != completion:
        problems.append(
            f"event {event.number} $.usage.completion_tokens: {completion}, but the stream's logprobs "
            f"counted {tokens_streamed} tokens"
        )
    return problems


def _counts(event: Event) -> tuple[int, int, int] | str:
    """(prompt, completion, total) tokens of an event's usage, or what is wrong with it."""
    usage = event.payload.get("usage")
    if not isinstance(usage, dict):
        return f"event {event.number} $.usage: expected an object, got {usage!r}"
    prompt, completion, total = (usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if not (_count(prompt) and _count(completion) and _count(total)):
        return f"event {event.number} $.usage: token counts are not integers: {usage}"
    return prompt, completion, total


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def continuous_usage_problems(stream: Stream, *, max_tokens: int, chat: bool) -> list[str]:
    """With stream_options.continuous_usage_stats: usage on every chunk, counting the tokens streamed so far.

    Every chunk's usage adds up, keeps the prompt's count, and its
    completion_tokens are the tokens the stream's logprobs have carried up to
    and including that chunk (so they never shrink); the final usage chunk
    keeps the include_usage rules: the one chunk with choices [], last, its
    count the whole stream's.
    """
    problems: list[str] = []
    chunks = list(stream.chunks())
    streamed, prompts = 0, set()
    for event in chunks:
        streamed += _logprob_entries(event, chat=chat)  # counted whether or not this chunk says so
        if event.payload.get("usage") is None:
            problems.append(f"event {event.number} $.usage: a chunk without usage under continuous_usage_stats")
            continue
        counts = _counts(event)
        if isinstance(counts, str):
            problems.append(counts)
            continue
        prompt, completion, total = counts
        prompts.add(prompt)
        if total != prompt + completion:
            problems.append(f"event {event.number} $.usage.total_tokens: {prompt} + {completion} != {total}")
        if event.payload.get("choices") == []:
            continue  # the final usage chunk: judged below
        if completion != streamed:
            problems.append(
                f"event {event.number} $.usage.completion_tokens: {completion}, but {streamed} token(s) "
                "streamed up to this chunk"
            )
    if len(prompts) > 1:
        problems.append(f"$.usage.prompt_tokens: changes during the stream ({sorted(prompts)})")
    finals = [event for event in chunks if event.payload.get("choices") == []]
    if len(finals) != 1:
        numbers = ", ".join(str(e.number) for e in finals) or "none"
        problems.append(f"$.choices: expected exactly one final usage chunk with choices [], got events {numbers}")
    elif finals[0].payload.get("usage") is not None:
        problems += _final_usage_problems(stream, finals[0], max_tokens=max_tokens, tokens_streamed=streamed)
    return problems


def _logprob_entries(event: Event, *, chat: bool) -> int:
    count = 0
    for choice in event.choices():
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict):
            entries = logprobs.get("content") if chat else logprobs.get("tokens")
            count += len(entries) if isinstance(entries, list) else 0
    return count


def streamed_tokens(stream: Stream, *, chat: bool) -> int:
    """How many tokens the stream's logprobs account for (one entry per sampled token)."""
    return sum(_logprob_entries(event, chat=chat) for event in stream.chunks())


def logprob_problems(stream: Stream, *, chat: bool) -> list[str]:
    """Asked for logprobs, every chunk that carries text carries its logprobs."""
    problems = []
    for event in stream.chunks():
        for position, choice in enumerate(event.choices()):
            delta = choice.get("delta") if chat else choice
            text = delta.get("content" if chat else "text") if isinstance(delta, dict) else None
            if not text:
                continue
            logprobs = choice.get("logprobs")
            entries = None
            if isinstance(logprobs, dict):
                entries = logprobs.get("content") if chat else logprobs.get("tokens")
            if not entries:
                where = "content" if chat else "tokens"
                problems.append(
                    f"event {event.number} $.choices[{position}].logprobs.{where}: text {text[:20]!r} "
                    f"streamed without its logprobs ({logprobs!r:.60})"
                )
    return problems
