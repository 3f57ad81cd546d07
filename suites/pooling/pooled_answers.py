"""Pooling answers held to each other: the same vector however it is asked for, and scores that are its cosines.

A pooling server's answers are numbers a client cannot check one by one, so
each check asks for the same thing two ways and compares: floats and base64,
one input alone and in a batch, a truncated text and its leading token ids,
``/score`` and the cosine of the two ``/v1/embeddings`` vectors, ``/rerank``
and ``/score``, ``/rerank`` and its ``/v1/`` and ``/v2/`` aliases. Vectors are
held equal by their cosine (``pooling.min_cosine``), scores within
``pooling.score_tolerance``: the engine's float arithmetic differs a little
with the batch it runs in. What a release does with ``dimensions`` and
``return_documents`` is read from its facts (catalogue/facts/pooling.yaml).
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.connection.client import BoundedClient, Response
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids

EMBEDDINGS = "/v1/embeddings"
SCORE = "/score"
RERANK = "/rerank"
# Distinct inputs of different lengths and words, so that their vectors are told apart; the last is long enough to
# truncate to half.
TEXTS = (
    "The river runs under the old stone bridge.",
    "Prices of copper rose again this quarter",
    "a cat",
    "Seven engineers reviewed the seventh release candidate before lunch on a rainy Friday in March.",
)
QUERY = "Where does the river run?"
# The documents scored and reranked: the texts in another order, so that a ranking is not the order they were sent
# in by chance (tiny-bert ranks the texts in their own order).
DOCUMENTS = (TEXTS[2], TEXTS[0], TEXTS[3], TEXTS[1])
TOP_N = 2

Vector = list[float]


@dataclass(frozen=True)
class Tolerances:
    min_cosine: float
    score: float

    @classmethod
    def of(cls, expect: Expectations) -> Tolerances:
        return cls(
            float(expect.declared("pooling", "min_cosine").value),
            float(expect.declared("pooling", "score_tolerance").value),
        )


@dataclass
class Checked:
    """What a check found wrong; ``undecided`` says why it could not judge at all."""

    problems: list[str] = field(default_factory=list)
    undecided: str | None = None


class Unreadable(Exception):
    """An answer that is not the one asked for: the request and what came back, in a problem's words."""


def cosine(a: Vector, b: Vector) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norms if norms else 0.0


def _payload(response: Response, what: str) -> dict[str, Any]:
    payload = response.json_or_none() if response.status == 200 else None
    if not isinstance(payload, dict):
        raise Unreadable(f"{what} was not served: {response.describe()} {response.text[:200]!r}")
    return payload


def _floats(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in value)


def decode_base64(text: str) -> Vector:
    """An embedding as OpenAI's SDK reads a base64 one: little-endian float32 (numpy ``frombuffer(dtype=float32)``)."""
    raw = base64.b64decode(text, validate=True)
    if len(raw) % 4:
        raise ValueError(f"{len(raw)} bytes, not a whole number of float32 values")
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


@dataclass(frozen=True)
class Embedded:
    """An answer of /v1/embeddings: its items in the answer's order."""

    indices: list[Any]
    embeddings: list[Any]  # each a list of floats, or a base64 string
    prompt_tokens: Any

    def vector(self, position: int = 0) -> Vector:
        value = self.embeddings[position]
        if isinstance(value, str):
            try:
                return decode_base64(value)
            except (binascii.Error, ValueError) as exc:
                raise Unreadable(f"item {position}'s base64 embedding does not decode as float32: {exc}") from None
        if not _floats(value):
            raise Unreadable(f"item {position}'s embedding is not a list of numbers: {str(value)[:80]}")
        return [float(x) for x in value]


def read_embedded(response: Response) -> Embedded:
    """A /v1/embeddings answer's items; ``Unreadable`` where it is not a 200 with a list of them."""
    payload = _payload(response, f"POST {EMBEDDINGS}")
    data = payload.get("data")
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise Unreadable(f"POST {EMBEDDINGS} answered no list of items in data: {response.describe()}")
    usage = payload.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return Embedded(
        [item.get("index") for item in data], [item.get("embedding") for item in data], usage.get("prompt_tokens")
    )


def embed(client: BoundedClient, model: str, given: Any, **fields: Any) -> Embedded:
    return read_embedded(client.post(EMBEDDINGS, {"model": model, "input": given, **fields}))


def alone(client: BoundedClient, model: str, given: Any, **fields: Any) -> Vector:
    answer = embed(client, model, given, **fields)
    if len(answer.embeddings) != 1:
        raise Unreadable(f"POST {EMBEDDINGS} of one input answered {len(answer.embeddings)} items")
    return answer.vector()


def _quoted(text: str) -> str:
    return repr(text if len(text) <= 24 else text[:21].rstrip() + "...")


def same_vector(what: str, got: Vector, want: Vector, tolerances: Tolerances) -> list[str]:
    """``got`` is ``want``: as long, and pointing the same way."""
    if len(got) != len(want):
        return [f"{what}: {len(got)} values against {len(want)}"]
    similarity = cosine(got, want)
    if similarity < tolerances.min_cosine:
        return [f"{what}: cosine {similarity:.6f}, below {tolerances.min_cosine} (pooling.min_cosine)"]
    return []


# ---- /v1/embeddings ---------------------------------------------------------------------------------------------


def base64_matches_float(client: BoundedClient, model: str, tolerances: Tolerances) -> Checked:
    try:
        floats = embed(client, model, TEXTS[0])
        encoded = embed(client, model, TEXTS[0], encoding_format="base64")
        if not isinstance(encoded.embeddings[0] if encoded.embeddings else None, str):
            return Checked([f"encoding_format base64 answered no string: {str(encoded.embeddings)[:80]}"])
        problems = same_vector("the base64 vector against the float one", encoded.vector(), floats.vector(), tolerances)
    except Unreadable as exc:
        return Checked([str(exc)])
    return Checked(problems)


def batch_matches_alone(client: BoundedClient, model: str, tolerances: Tolerances) -> Checked:
    try:
        batch = embed(client, model, list(TEXTS))
        if len(batch.embeddings) != len(TEXTS):
            return Checked([f"a batch of {len(TEXTS)} inputs answered {len(batch.embeddings)} items"])
        problems = []
        if batch.indices != list(range(len(TEXTS))):
            problems.append(f"the items' index fields are {batch.indices}, not {list(range(len(TEXTS)))} in order")
        for position, text in enumerate(TEXTS):
            what = f"item {position} of the batch ({_quoted(text)}) against that input alone"
            problems += same_vector(what, batch.vector(position), alone(client, model, text), tolerances)
    except Unreadable as exc:
        return Checked([str(exc)])
    return Checked(problems)


def dimensions_as_declared(
    client: BoundedClient, model: str, tolerances: Tolerances, matryoshka: bool | None, refusal: dict[str, Any]
) -> Checked:
    """Half the full vector's length asked for: refused, or honoured as the leading part of the full vector."""
    try:
        full = alone(client, model, TEXTS[0])
    except Unreadable as exc:
        return Checked([str(exc)])
    size = max(1, len(full) // 2)
    response = client.post(EMBEDDINGS, {"model": model, "input": TEXTS[0], "dimensions": size})
    asked = f"dimensions {size} (the full vector has {len(full)})"
    if 400 <= response.status < 500:
        if matryoshka:
            return Checked([f"{asked} refused, but the profile declares the model Matryoshka: {response.describe()}"])
        problems = []
        if response.status != refusal["refusal_status"] or refusal["refusal_names"] not in response.text:
            problems.append(
                f"{asked} refused with {response.status} {response.text[:200]!r}; the release refuses it with "
                f"{refusal['refusal_status']} naming {refusal['refusal_names']}"
            )
        return Checked(problems)
    try:
        answer = read_embedded(response)
        if len(answer.embeddings) != 1:
            raise Unreadable(f"one input was answered with {len(answer.embeddings)} items")
        vector = answer.vector()
    except Unreadable as exc:
        return Checked([f"{asked}: {exc}"])
    if len(vector) != size:
        ignored = f"{asked} answered {len(vector)} values: dimensions was ignored"
        return Checked([ignored + ("" if matryoshka is not None else ", neither refused nor honoured")])
    if matryoshka is False:
        return Checked([f"{asked} honoured, but the profile declares the model not Matryoshka (pooling.matryoshka)"])
    return Checked(same_vector(f"{asked}, against the full vector's first {size}", vector, full[:size], tolerances))


def truncate_prompt_tokens_honoured(client: BoundedClient, model: str, tolerances: Tolerances) -> Checked:
    text = TEXTS[-1]
    try:
        ids = token_ids(client, model, prompt=text, minimum=4)
    except TokenizeUnavailable as exc:
        return Checked(undecided=f"the input's token ids are unknown: {exc}")
    keep = len(ids) // 2
    try:
        truncated = embed(client, model, text, truncate_prompt_tokens=keep, truncation_side="right")
        if len(truncated.embeddings) != 1:
            return Checked([f"one input was answered with {len(truncated.embeddings)} items"])
        problems = []
        if truncated.prompt_tokens != keep:
            problems.append(f"truncate_prompt_tokens {keep}: usage.prompt_tokens is {truncated.prompt_tokens}")
        what = f"the text truncated to {keep} of its {len(ids)} tokens, against those {keep} token ids"
        problems += same_vector(what, truncated.vector(), alone(client, model, ids[:keep]), tolerances)
    except Unreadable as exc:
        return Checked([str(exc)])
    return Checked(problems)


# ---- /score and /rerank -----------------------------------------------------------------------------------------


def scores(client: BoundedClient, model: str) -> list[float]:
    """/score of the query against every text, in the texts' order (index i on item i)."""
    response = client.post(SCORE, {"model": model, "queries": QUERY, "documents": list(DOCUMENTS)})
    data = _payload(response, f"POST {SCORE}").get("data")
    if not isinstance(data, list) or len(data) != len(DOCUMENTS) or not all(isinstance(item, dict) for item in data):
        count = len(DOCUMENTS)
        raise Unreadable(f"{count} documents were not answered with {count} scores: {response.describe()}")
    indices = [item.get("index") for item in data]
    if indices != list(range(len(DOCUMENTS))):
        raise Unreadable(f"the scores' index fields are {indices}, not {list(range(len(DOCUMENTS)))} in order")
    values = [item.get("score") for item in data]
    if not _floats(values):
        raise Unreadable(f"the scores are not numbers: {values}")
    return [float(value) for value in values]


def score_is_embedding_cosine(client: BoundedClient, model: str, tolerances: Tolerances) -> Checked:
    try:
        scored = scores(client, model)
        query = alone(client, model, QUERY)
        problems = []
        for text, score in zip(DOCUMENTS, scored, strict=True):
            expected = cosine(query, alone(client, model, text))
            if abs(score - expected) > tolerances.score:
                problems.append(
                    f"the score of {_quoted(text)} is {score:.6f}, the cosine of the two embeddings {expected:.6f} "
                    f"(pooling.score_tolerance {tolerances.score})"
                )
    except Unreadable as exc:
        return Checked([str(exc)])
    return Checked(problems)


@dataclass(frozen=True)
class Ranking:
    indices: list[Any]
    scores: list[Any]
    documents: list[Any]


def rerank(client: BoundedClient, model: str, path: str = RERANK, **fields: Any) -> Ranking:
    response = client.post(path, {"model": model, "query": QUERY, "documents": list(DOCUMENTS), **fields})
    results = _payload(response, f"POST {path}").get("results")
    if not isinstance(results, list) or not all(isinstance(result, dict) for result in results):
        raise Unreadable(f"POST {path} answered no list of results: {response.describe()}")
    return Ranking(
        [result.get("index") for result in results],
        [result.get("relevance_score") for result in results],
        [(result.get("document") or {}).get("text") for result in results],
    )


def ranking_problems(ranking: Ranking, scored: list[float], tolerance: float) -> list[str]:
    """The whole ranking: every document once, highest first, each with its text and its /score."""
    every = list(range(len(DOCUMENTS)))
    if sorted(i for i in ranking.indices if isinstance(i, int)) != every:
        return [f"the results' indices are {ranking.indices}: not each of the {len(DOCUMENTS)} documents once"]
    if not _floats(ranking.scores):
        return [f"the relevance scores are not numbers: {ranking.scores}"]
    problems = []
    if ranking.scores != sorted(ranking.scores, reverse=True):
        problems.append(f"the results are not sorted by relevance_score: {[round(s, 6) for s in ranking.scores]}")
    for index, text, score in zip(ranking.indices, ranking.documents, ranking.scores, strict=True):
        if text != DOCUMENTS[index]:
            problems.append(f"result for document {index} carries the document {text!r}, not {DOCUMENTS[index]!r}")
        if abs(score - scored[index]) > tolerance:
            problems.append(f"document {index}'s relevance_score {score:.6f} is not its /score {scored[index]:.6f}")
    return problems


def rerank_ranked(client: BoundedClient, model: str, tolerances: Tolerances, aliases: list[str]) -> Checked:
    try:
        scored = scores(client, model)
        ranking = rerank(client, model)
        problems = ranking_problems(ranking, scored, tolerances.score)
        top = rerank(client, model, top_n=TOP_N)
        if top.indices != ranking.indices[:TOP_N]:
            problems.append(f"top_n {TOP_N} answered the documents {top.indices}, not {ranking.indices[:TOP_N]}")
        for path in aliases:
            other = rerank(client, model, path)
            if other.indices != ranking.indices:
                problems.append(f"POST {path} ranks the documents {other.indices}, POST {RERANK} {ranking.indices}")
            elif not _floats(other.scores) or any(
                abs(a - b) > tolerances.score for a, b in zip(other.scores, ranking.scores, strict=True)
            ):
                problems.append(f"POST {path} scores {other.scores}, POST {RERANK} {ranking.scores}")
    except Unreadable as exc:
        return Checked([str(exc)])
    return Checked(problems)


def score_matches_pairs(client: BoundedClient, model: str, tolerances: Tolerances) -> Checked:
    """/score of the query against every document: each score that of the pair sent alone, in the documents' order.

    Holds for any scorer, a bi-encoder's cosine or a cross-encoder's logit: a relay or engine that reorders, drops
    or mixes the scores of a request fails it.
    """
    try:
        scored = scores(client, model)
        problems = []
        for index, text in enumerate(DOCUMENTS):
            response = client.post(SCORE, {"model": model, "queries": QUERY, "documents": [text]})
            data = _payload(response, f"POST {SCORE} of one document").get("data")
            value = data[0].get("score") if isinstance(data, list) and data and isinstance(data[0], dict) else None
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise Unreadable(f"POST {SCORE} of one document answered no score: {str(data)[:120]}")
            if abs(scored[index] - value) > tolerances.score:
                problems.append(
                    f"document {index} ({_quoted(text)}) scored {scored[index]:.6f} among the others and "
                    f"{value:.6f} alone (pooling.score_tolerance {tolerances.score})"
                )
    except Unreadable as exc:
        return Checked([str(exc)])
    return Checked(problems)


# ---- /classify ---------------------------------------------------------------------------------------------------

CLASSIFY = "/classify"


@dataclass(frozen=True)
class Classified:
    """One /classify result: its index, label, probabilities and number of classes, as answered."""

    index: Any
    label: Any
    probs: Any
    num_classes: Any


def classify(client: BoundedClient, model: str, given: Any) -> list[Classified]:
    response = client.post(CLASSIFY, {"model": model, "input": given})
    data = _payload(response, f"POST {CLASSIFY}").get("data")
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise Unreadable(f"POST {CLASSIFY} answered no list of results in data: {response.describe()}")
    return [Classified(d.get("index"), d.get("label"), d.get("probs"), d.get("num_classes")) for d in data]


def result_problems(what: str, result: Classified, activation: dict[str, str], tolerance: float) -> list[str]:
    """A result's own consistency: ``num_classes`` probabilities, each in [0, 1]; where the release's activation for
    that many classes is a softmax (fact ``classify_activation``), summing to 1. A sigmoid (one label) gives any
    value in [0, 1]."""
    probs = result.probs
    if not _floats(probs) or not probs:
        return [f"{what}: probs is not a list of numbers: {str(probs)[:80]}"]
    problems = []
    if result.num_classes != len(probs):
        problems.append(f"{what}: num_classes {result.num_classes} for {len(probs)} probabilities")
    if any(not 0.0 <= p <= 1.0 for p in probs):
        problems.append(f"{what}: probabilities outside [0, 1]: {[round(p, 6) for p in probs]}")
    softmax = activation["one_label" if len(probs) == 1 else "labels"] == "softmax"
    if softmax and abs(sum(probs) - 1.0) > tolerance:
        problems.append(
            f"{what}: the {len(probs)} probabilities sum to {sum(probs):.6f}, not 1 (pooling.probability_tolerance "
            f"{tolerance})"
        )
    if not isinstance(result.label, str) or not result.label:
        problems.append(f"{what}: label {result.label!r} is no label name")
    return problems


def classify_probabilities(
    client: BoundedClient, model: str, tolerances: Tolerances, activation: dict[str, str], probability_tolerance: float
) -> Checked:
    """A batch of the texts: one result per input in order, each a distribution over the model's classes whose
    label is its argmax's (one name per class across the results), and each the result of its input alone."""
    try:
        batch = classify(client, model, list(TEXTS))
        if len(batch) != len(TEXTS):
            return Checked([f"a batch of {len(TEXTS)} inputs answered {len(batch)} results"])
        problems = []
        indices = [result.index for result in batch]
        if indices != list(range(len(TEXTS))):
            problems.append(f"the results' index fields are {indices}, not {list(range(len(TEXTS)))} in order")
        names: dict[int, Any] = {}
        for position, (text, result) in enumerate(zip(TEXTS, batch, strict=True)):
            what = f"result {position} ({_quoted(text)})"
            found = result_problems(what, result, activation, probability_tolerance)
            problems += found
            if found:
                continue
            top = max(range(len(result.probs)), key=result.probs.__getitem__)
            if names.setdefault(top, result.label) != result.label:
                problems.append(f"{what}: class {top} is labelled {result.label!r} here, {names[top]!r} before")
            single = classify(client, model, text)
            if len(single) != 1 or not _floats(single[0].probs) or len(single[0].probs) != len(result.probs):
                problems.append(f"{what}: the input alone answered {str(single)[:120]}")
            elif any(abs(a - b) > tolerances.score for a, b in zip(single[0].probs, result.probs, strict=True)):
                problems.append(
                    f"{what}: probs {[round(p, 6) for p in result.probs]} in the batch, "
                    f"{[round(p, 6) for p in single[0].probs]} alone (pooling.score_tolerance {tolerances.score})"
                )
        if len(names) > 1 and len(set(names.values())) != len(names):
            problems.append(f"two classes share a label: {names}")
    except Unreadable as exc:
        return Checked([str(exc)])
    return Checked(problems)


# ---- what a release refuses -------------------------------------------------------------------------------------

POOLING = "/pooling"


def removed_fields_refused(client: BoundedClient, model: str, removed: dict[str, Any]) -> Checked:
    """Each field and task name the release removed, sent to /pooling (every pooling runner's route): refused with
    the release's status, naming it; a 200 means a client still sending it gets what it did not ask for."""
    asked: list[tuple[str, dict[str, Any], str]] = [
        (f"{name}: true", {name: True}, name) for name in removed["parameters"]
    ] + [(f"task {task!r}", {"task": task}, "task") for task in removed["tasks"]]
    problems = []
    for what, fields, named in asked:
        response = client.post(POOLING, {"model": model, "input": TEXTS[2], **fields})
        if response.status != removed["status"] or named not in response.text:
            problems.append(
                f"POST {POOLING} with {what} answered {response.status} {response.text[:160]!r}; the release "
                f"refuses it with {removed['status']} naming {named}"
            )
    return Checked(problems)
