"""The pooling suite's judgements, on answers written here: what each check calls conformant, and what not.

The checks themselves fail on a real embedding server through the fault proxy
(tests/integration/test_embeddings_on_real_vllm.py,
test_pooling_models_on_real_vllm.py); here, their branches one by one: a
Matryoshka model's honoured dimensions, a base64 string that does not
decode, a ranking out of order, a drift baseline that compares nothing.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import httpx
import pytest

from pytest_vllm_conformance.connection.response import Response
from suites.pooling import pooled_answers

TOLERANCES = pooled_answers.Tolerances(min_cosine=0.9999, score=0.0001)
REFUSAL = {"refusal_status": 400, "refusal_names": "dimensions"}
FULL = [0.6, 0.0, 0.0, 0.8]


def _response(path: str, status: int, payload: Any) -> Response:
    body = json.dumps(payload).encode()
    return Response("POST", path, status, httpx.Headers(), body, len(body), False, 0.001)


class Answers:
    """A client whose answer to each POST is what ``answer(path, body)`` gives; it keeps the bodies sent."""

    def __init__(self, answer):
        self.answer = answer
        self.sent: list[dict[str, Any]] = []

    def post(self, path: str, json_body: Any = None, **kw: Any) -> Response:
        self.sent.append(json_body)
        status, payload = self.answer(path, json_body)
        return _response(path, status, payload)


def _embedded(*vectors: Any) -> dict[str, Any]:
    data = [{"index": i, "object": "embedding", "embedding": v} for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "usage": {"prompt_tokens": 5, "total_tokens": 5}}


def _encoded(vector: list[float], order: str = "<") -> str:
    return base64.b64encode(struct.pack(f"{order}{len(vector)}f", *vector)).decode()


def test_a_base64_vector_is_read_as_little_endian_float32():
    assert pooled_answers.decode_base64(_encoded([1.0, -2.5])) == [1.0, -2.5]
    assert pooled_answers.decode_base64(_encoded([1.0, -2.5], ">")) != [1.0, -2.5]  # big-endian bytes read otherwise
    with pytest.raises(ValueError, match="not a whole number of float32"):
        pooled_answers.decode_base64(base64.b64encode(b"abcdef").decode())


@pytest.mark.parametrize(
    "encoded, problem",
    [
        (_encoded(FULL), None),
        (_encoded([0.8, 0.0, 0.0, 0.6]), "the base64 vector against the float one: cosine 0.960000"),
        (_encoded(FULL, ">"), "cosine"),
        (FULL, "encoding_format base64 answered no string"),
        ("***", "does not decode as float32"),
    ],
)
def test_base64_must_decode_to_the_float_answer(encoded, problem):
    def answer(path, body):
        return 200, _embedded(encoded if body.get("encoding_format") == "base64" else FULL)

    checked = pooled_answers.base64_matches_float(Answers(answer), "m", TOLERANCES)
    assert (checked.problems == []) if problem is None else (problem in "; ".join(checked.problems)), checked


def _vector_of(text: str) -> list[float]:
    return [float(len(text)), 1.0, float(pooled_answers.TEXTS.index(text) if text in pooled_answers.TEXTS else -1), 0.5]


def test_a_batch_is_answered_in_order_with_each_inputs_own_vector():
    def answer(path, body):
        given = body["input"]
        return 200, _embedded(*(_vector_of(text) for text in (given if isinstance(given, list) else [given])))

    assert pooled_answers.batch_matches_alone(Answers(answer), "m", TOLERANCES).problems == []

    def reordered(path, body):
        status, payload = answer(path, body)
        payload["data"].reverse()
        return status, payload

    problems = pooled_answers.batch_matches_alone(Answers(reordered), "m", TOLERANCES).problems
    assert problems[0] == "the items' index fields are [3, 2, 1, 0], not [0, 1, 2, 3] in order"
    assert problems[1].startswith("item 0 of the batch ('The river runs under...') against that input alone: cosine")

    def short(path, body):
        return 200, _embedded(FULL)

    assert pooled_answers.batch_matches_alone(Answers(short), "m", TOLERANCES).problems == [
        "a batch of 4 inputs answered 1 items"
    ]


def _dimensions(status: int, payload: Any):
    def answer(path, body):
        return (status, payload) if "dimensions" in body else (200, _embedded(FULL))

    return Answers(answer)


REFUSED = {"error": {"message": "Model 'm' does not support Matryoshka embeddings; dimensions must be unset"}}


@pytest.mark.parametrize("matryoshka", [None, True, False])
@pytest.mark.parametrize(
    "answer, conformant",
    [
        ((400, REFUSED), {None: True, True: False, False: True}),
        ((422, {"detail": "no"}), {None: False, True: False, False: False}),  # not the release's refusal
        ((200, _embedded([0.6, 0.0])), {None: True, True: True, False: False}),  # honoured: FULL's first half
        ((200, _embedded([0.0, 1.0])), {None: False, True: False, False: False}),  # of that length, not that part
        ((200, _embedded(FULL)), {None: False, True: False, False: False}),  # ignored
    ],
)
def test_dimensions_are_refused_or_honoured_as_declared_never_ignored(matryoshka, answer, conformant):
    client = _dimensions(*answer)
    checked = pooled_answers.dimensions_as_declared(client, "m", TOLERANCES, matryoshka, REFUSAL)
    assert (checked.problems == []) == conformant[matryoshka], checked
    assert client.sent[-1]["dimensions"] == 2  # half the full vector


def test_dimensions_ignored_says_so():
    checked = pooled_answers.dimensions_as_declared(_dimensions(200, _embedded(FULL)), "m", TOLERANCES, None, REFUSAL)
    assert checked.problems == [
        "dimensions 2 (the full vector has 4) answered 4 values: dimensions was ignored, neither refused nor honoured"
    ]


def test_truncation_compares_the_truncated_text_with_its_leading_token_ids():
    ids = list(range(100, 112))

    def answer(path, body):
        if path == "/tokenize":
            return 200, {"tokens": ids, "count": len(ids)}
        given = body["input"]
        kept = given if isinstance(given, list) else ids[: body.get("truncate_prompt_tokens") or len(ids)]
        payload = _embedded([float(len(kept)), 1.0, float(kept[-1]), 0.0])
        payload["usage"]["prompt_tokens"] = len(kept)
        return 200, payload

    client = Answers(answer)
    assert pooled_answers.truncate_prompt_tokens_honoured(client, "m", TOLERANCES).problems == []
    assert client.sent[-1]["input"] == ids[:6]
    assert client.sent[-2] | {"input": None} == {
        "model": "m",
        "input": None,
        "truncate_prompt_tokens": 6,
        "truncation_side": "right",
    }

    def dropped(path, body):
        body.pop("truncate_prompt_tokens", None)
        return answer(path, body)

    problems = pooled_answers.truncate_prompt_tokens_honoured(Answers(dropped), "m", TOLERANCES).problems
    assert problems[0] == "truncate_prompt_tokens 6: usage.prompt_tokens is 12"
    assert problems[1].startswith("the text truncated to 6 of its 12 tokens, against those 6 token ids: cosine")

    def no_tokenize(path, body):
        return (404, {"detail": "Not Found"}) if path == "/tokenize" else answer(path, body)

    checked = pooled_answers.truncate_prompt_tokens_honoured(Answers(no_tokenize), "m", TOLERANCES)
    assert checked.undecided and checked.undecided.startswith("the input's token ids are unknown: /tokenize")


def _scorer(texts_vectors, reorder=False, skew=0.0, top_n=True):
    query = [1.0, 0.0, 0.0, 0.0]

    def vector(text):
        return query if text == pooled_answers.QUERY else texts_vectors[pooled_answers.DOCUMENTS.index(text)]

    def answer(path, body):
        if path == "/v1/embeddings":
            return 200, _embedded(vector(body["input"]))
        scores = [pooled_answers.cosine(query, vector(text)) + skew for text in pooled_answers.DOCUMENTS]
        if path == "/score":
            return 200, {"data": [{"index": i, "score": s} for i, s in enumerate(scores)]}
        results = sorted(
            (
                {"index": i, "document": {"text": pooled_answers.DOCUMENTS[i]}, "relevance_score": s}
                for i, s in enumerate(scores)
            ),
            key=lambda r: r["relevance_score"],
            reverse=True,
        )
        if reorder and path == "/rerank":
            results.reverse()
        return 200, {"results": results[: (body.get("top_n") if top_n else None) or None]}

    return Answers(answer)


VECTORS = [[0.9, 0.1, 0.0, 0.0], [0.1, 0.9, 0.0, 0.0], [0.5, 0.5, 0.1, 0.0], [0.0, 0.0, 1.0, 0.0]]
ALIASES = ["/v1/rerank", "/v2/rerank"]


def test_score_is_the_cosine_of_the_two_embeddings():
    assert pooled_answers.score_is_embedding_cosine(_scorer(VECTORS), "m", TOLERANCES).problems == []
    problems = pooled_answers.score_is_embedding_cosine(_scorer(VECTORS, skew=0.01), "m", TOLERANCES).problems
    assert len(problems) == 4
    assert problems[0].startswith("the score of 'a cat' is 1.003884, the cosine of the two embeddings 0.993884")


def test_rerank_is_sorted_by_the_pairs_scores_and_its_aliases_agree():
    assert pooled_answers.rerank_ranked(_scorer(VECTORS), "m", TOLERANCES, ALIASES).problems == []
    problems = pooled_answers.rerank_ranked(_scorer(VECTORS, reorder=True), "m", TOLERANCES, ALIASES).problems
    assert problems[0].startswith("the results are not sorted by relevance_score: ")
    assert "POST /v1/rerank ranks the documents [0, 2, 1, 3], POST /rerank [3, 1, 2, 0]" in problems
    ignored = pooled_answers.rerank_ranked(_scorer(VECTORS, top_n=False), "m", TOLERANCES, ALIASES).problems
    assert ignored == ["top_n 2 answered the documents [0, 2, 1, 3], not [0, 2]"]


def test_a_result_must_carry_its_own_document():
    documents = pooled_answers.DOCUMENTS
    ranking = pooled_answers.Ranking([0, 1, 2, 3], [0.9, 0.5, 0.2, 0.1], [*documents[:2], documents[3], None])
    problems = pooled_answers.ranking_problems(ranking, [0.9, 0.5, 0.2, 0.1], 0.0001)
    assert problems == [
        f"result for document 2 carries the document {documents[3]!r}, not {documents[2]!r}",
        f"result for document 3 carries the document None, not {documents[3]!r}",
    ]
    missing = pooled_answers.Ranking([0, 1, 1, 3], [0.9, 0.5, 0.2, 0.1], list(pooled_answers.DOCUMENTS))
    assert pooled_answers.ranking_problems(missing, [0.9] * 4, 0.0001) == [
        "the results' indices are [0, 1, 1, 3]: not each of the 4 documents once"
    ]


def _pair_scorer(rotate=False):
    """/score answering each document by its length (a cross-encoder's own relevance); ``rotate``: a request of
    several documents answered with its scores moved one place on."""

    def answer(path, body):
        scores = [len(text) / 100 for text in body["documents"]]
        if rotate and len(scores) > 1:
            scores = scores[-1:] + scores[:-1]
        return 200, {"data": [{"index": i, "score": value} for i, value in enumerate(scores)]}

    return Answers(answer)


def test_each_score_is_its_pairs_own():
    assert pooled_answers.score_matches_pairs(_pair_scorer(), "m", TOLERANCES).problems == []
    problems = pooled_answers.score_matches_pairs(_pair_scorer(rotate=True), "m", TOLERANCES).problems
    assert len(problems) == 4 and "scored 0.400000 among the others and 0.050000 alone" in problems[0]


SOFTMAX = {"one_label": "sigmoid", "labels": "softmax"}
LABELS = ("negative", "neutral", "positive")


def _classifier(probs_of, labels=LABELS, reverse=False):
    """/classify answering each text with ``probs_of(text)``, labelled by its argmax."""

    def answer(path, body):
        given = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for index, text in enumerate(given):
            probs = probs_of(text)
            top = max(range(len(probs)), key=probs.__getitem__)
            data.append({"index": index, "label": labels[top], "probs": probs, "num_classes": len(probs)})
        return 200, {"data": data[::-1] if reverse and len(data) > 1 else data}

    return Answers(answer)


def _by_length(text):
    first = (len(text) % 7) / 10
    return [first, 0.9 - first, 0.1]


def test_classifications_are_distributions_in_order_each_its_inputs_own():
    def classified(server):
        return pooled_answers.classify_probabilities(server, "m", TOLERANCES, SOFTMAX, 0.0001)

    assert classified(_classifier(_by_length)).problems == []
    # One label: a sigmoid, any value in [0, 1] (a cross-encoder's relevance).
    assert classified(_classifier(lambda text: [0.64], labels=("LABEL_0",))).problems == []
    reversed_ = classified(_classifier(_by_length, reverse=True)).problems
    assert reversed_[0] == "the results' index fields are [3, 2, 1, 0], not [0, 1, 2, 3] in order"
    short = classified(_classifier(lambda text: [0.5, 0.3, 0.1])).problems
    assert "the 3 probabilities sum to 0.900000, not 1 (pooling.probability_tolerance 0.0001)" in short[0]
    # A class named two ways across the results.
    renamed = _classifier(_by_length, labels=("a", "b", "c"))
    original = renamed.answer
    renamed.answer = lambda path, body: (
        (
            200,
            {
                "data": [
                    {**item, "label": "z"} if item["index"] == 3 else item for item in original(path, body)[1]["data"]
                ]
            },
        )
        if isinstance(body["input"], list)
        else original(path, body)
    )
    assert any("is labelled 'z' here" in problem for problem in classified(renamed).problems)


def test_removed_fields_must_be_refused_naming_them():
    removed = {"parameters": ["normalize"], "tasks": ["score", "encode"], "status": 400}

    def refusing(path, body):
        named = "normalize" if "normalize" in body else "task"
        return 400, {"error": {"message": f"{named} was removed", "param": named, "code": 400}}

    assert pooled_answers.removed_fields_refused(Answers(refusing), "m", removed).problems == []
    answered = pooled_answers.removed_fields_refused(Answers(lambda path, body: (200, {"data": []})), "m", removed)
    assert len(answered.problems) == 3
    assert answered.problems[0].startswith("POST /pooling with normalize: true answered 200")


# ---- embedding drift against a baseline --------------------------------------------------------------------------


def _embedder(vector_of):
    """A server embedding each single input as ``vector_of(text)``."""
    return Answers(lambda path, body: (200, _embedded(vector_of(body["input"]))))


def _drift(target, baseline, baseline_model="m", **kw):
    from suites.pooling.embedding_drift import Side, embedding_drift

    return embedding_drift(Side(target, "m"), Side(baseline, baseline_model), 0.999, **kw)


def test_drift_passes_within_the_floor_and_fails_below_it_naming_the_input():
    same = _drift(_embedder(lambda text: FULL), _embedder(lambda text: [0.6, 0.001, 0.0, 0.8]))
    assert not same.problems and not same.undecided
    skewed = _drift(_embedder(lambda text: [1.1, 0.0, 0.0, 0.8]), _embedder(lambda text: FULL))
    assert len(skewed.problems) == 5 and "below 0.999 (pooling.drift_min_cosine)" in skewed.problems[0]
    shorter = _drift(_embedder(lambda text: FULL[:2]), _embedder(lambda text: FULL))
    assert "2 values, the baseline's 4" in shorter.problems[0]


def test_drift_compares_nothing_it_cannot_and_is_then_undecided():
    # Another model on the baseline: not compared, unless the user named it.
    other = _drift(_embedder(lambda text: FULL), _embedder(lambda text: FULL), baseline_model="n")
    assert other.undecided and "not the target's 'm'" in other.undecided and not other.problems
    assert not _drift(_embedder(lambda t: FULL), _embedder(lambda t: FULL), "n", model_named=True).undecided
    # A baseline that embeds nothing (a generation server's 404): undecided, never a pass.
    nothing = _drift(_embedder(lambda text: FULL), Answers(lambda path, body: (404, {"error": {"code": 404}})))
    assert nothing.undecided and "the baseline embeds nothing to compare with" in nothing.undecided
