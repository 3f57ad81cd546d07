"""Long-context retrieval documents, sized to a fraction of the server's context.

YaRN changed in vLLM 0.30 (vllm/config/model.py, _get_and_verify_max_len): the same checkpoint
can get another ``max_model_len`` or other rotary scaling, and a model that
is fine on short prompts answers wrongly far into its context. So each
document hides one fact (a "needle") at a chosen depth of a filler text, and
its prompt is grown until, with the answer budget, it fills the wanted
fraction of ``max_model_len``: the server's own ``/tokenize`` counts every
prompt, the way lm-eval's tokenizer encodes it (no special tokens added).

The filler and the needles come from fixed seeds, so the same server gets
the same documents in every run, and a stored baseline can be compared item
by item.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids

FILLER_SEED = 503
ITEMS_PER_LENGTH = 8
# Each item is a prompt of up to max_model_len tokens, sized by bisection with /tokenize.
MAX_ITEMS_PER_LENGTH = 500
ANSWER_TOKENS = 8  # the task's max_gen_toks: room the prompt leaves for the answer
QUESTION = "What is the access code for the {colour} door?"
NEEDLE = "The access code for the {colour} door is {code}."
COLOURS = ("red", "blue", "green", "yellow", "purple", "orange", "silver", "golden", "white", "black")
SUBJECTS = (
    "The old miller",
    "A quiet river",
    "The morning train",
    "Every lantern",
    "The school choir",
    "A tired sailor",
    "The village baker",
    "The northern wind",
    "A grey heron",
    "The market square",
)
VERBS = ("passed", "watched", "followed", "remembered", "carried", "crossed", "painted", "visited")
OBJECTS = (
    "the wooden bridge",
    "a field of barley",
    "the harbour wall",
    "the long road home",
    "a basket of apples",
    "the chapel bell",
    "the orchard gate",
    "a row of chimneys",
    "the copper kettle",
    "the evening tide",
)
TAILS = ("before noon", "in the rain", "without a word", "once again", "as usual", "at dawn", "for a while")
# Tokens per filler word, first guess; refined on the server's tokenizer.
FIRST_GUESS_TOKENS_PER_WORD = 1.5
BYTES_PER_TOKEN_IN_TOKENIZE_ANSWER = 12


class LongContextUnavailable(Exception):
    """Documents of the wanted length cannot be built on this server; the message says why."""


@dataclass(frozen=True)
class Sizing:
    """What a fraction of the context means on this server."""

    percent: int
    max_model_len: int

    @property
    def prompt_budget(self) -> int:
        return self.max_model_len * self.percent // 100 - ANSWER_TOKENS


def filler_words(count: int, seed: int = FILLER_SEED) -> list[str]:
    """``count`` words of plain sentences from a fixed seed: the same text in every run."""
    rng = random.Random(seed)
    words: list[str] = []
    while len(words) < count:
        sentence = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}."
        words.extend(sentence.split(" "))
    return words


def _prompt(context: str, question: str) -> str:
    # Must render exactly as the task's doc_to_text does (tasks/long_context.yaml).
    return f"{context}\n\nQuestion: {question}\nAnswer:"


def _haystack(words: list[str], count: int, depth: float, needle: str) -> str:
    """The first ``count`` filler words with the needle after the sentence nearest ``depth``."""
    body = words[:count]
    at = int(depth * len(body))
    while 0 < at < len(body) and not body[at - 1].endswith("."):
        at -= 1
    return " ".join([*body[:at], needle, *body[at:]])


class _Counter:
    def __init__(self, client: BoundedClient, model: str, max_model_len: int) -> None:
        self.client = client
        self.model = model
        self.cap = BYTES_PER_TOKEN_IN_TOKENIZE_ANSWER * 2 * max_model_len + 65536
        self.calls = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        try:
            tokens = token_ids(self.client, self.model, prompt=text, add_special_tokens=False, max_body=self.cap)
        except TokenizeUnavailable as exc:
            raise LongContextUnavailable(f"cannot size prompts: {exc}") from None
        return len(tokens)


def _largest_fitting(
    measure, words: list[str], depth: float, needle: str, question: str, budget: int, guess: int
) -> tuple[int, int]:
    """The most filler words whose prompt fits the budget, and its token count (bracket, then bisect)."""

    def tokens(count: int) -> int:
        return measure(_prompt(_haystack(words, count, depth, needle), question))

    low, low_tokens = 0, tokens(0)
    if low_tokens > budget:
        raise LongContextUnavailable(f"the question alone takes {low_tokens} tokens, more than the budget of {budget}")
    high = None
    probe = max(1, min(guess, len(words)))
    while high is None:
        probe_tokens = tokens(probe)
        if probe_tokens <= budget:
            low, low_tokens = probe, probe_tokens
            if probe == len(words):
                raise LongContextUnavailable("the filler ran out before the prompt filled the budget")
            probe = min(len(words), probe + max(1, (budget - probe_tokens)) + 1)
        else:
            high = probe
    while high - low > 1:
        middle = (low + high) // 2
        middle_tokens = tokens(middle)
        if middle_tokens <= budget:
            low, low_tokens = middle, middle_tokens
        else:
            high = middle
    return low, low_tokens


def documents(client: BoundedClient, model: str, sizing: Sizing, items: int = ITEMS_PER_LENGTH) -> list[dict[str, Any]]:
    """``items`` retrieval documents whose prompts fill ``sizing`` (needles from 1/(2 items) to 1 - that)."""
    if sizing.prompt_budget < 32:
        raise LongContextUnavailable(
            f"{sizing.percent}% of max_model_len {sizing.max_model_len} leaves {sizing.prompt_budget} "
            "prompt tokens: too few"
        )
    measure = _Counter(client, model, sizing.max_model_len)
    # Twice the budget in words: even a tokenizer with whole-word tokens cannot run out.
    words = filler_words(2 * sizing.prompt_budget + 64)
    rng = random.Random(FILLER_SEED * 1000 + sizing.percent)
    docs = []
    guess = int(sizing.prompt_budget / FIRST_GUESS_TOKENS_PER_WORD * 0.9)
    for index in range(items):
        depth = (index + 0.5) / items
        colour = COLOURS[index % len(COLOURS)]
        code = str(rng.randrange(1000, 10000))
        needle = NEEDLE.format(colour=colour, code=code)
        question = QUESTION.format(colour=colour)
        # Documents of one length differ only in the needle, so the last fit is a close first guess.
        count, prompt_tokens = _largest_fitting(measure, words, depth, needle, question, sizing.prompt_budget, guess)
        guess = count
        docs.append(
            {
                "context": _haystack(words, count, depth, needle),
                "question": question,
                "answer": code,
                "depth": round(depth, 4),
                "prompt_tokens": prompt_tokens,
                "percent_of_max_model_len": sizing.percent,
            }
        )
    return docs
