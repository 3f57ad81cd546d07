"""The engine_invariants room's judgements on recorded answers, and the cache configuration read from /metrics."""

from packaging.version import Version

from pytest_vllm_conformance.catalogue import contracts
from pytest_vllm_conformance.catalogue.applicability import MOST_PREEMPTION_REQUESTS
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.protocol import prometheus
from suites.engine_invariants.invariance import (
    Greedy,
    KvCache,
    divergence,
    kv_cache,
    mean_logprob_drift,
    preemption_load,
)

CACHE_INFO = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="128",enable_prefix_caching="%s",engine="0"} 1.0\n'
    "# TYPE vllm:prefix_cache_hits_total counter\n"
    'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 256.0\n'
)


def answer(tokens, top):
    return Greedy(tokens, top, None)


def test_equal_answers_do_not_diverge_and_drift_nothing():
    first = answer([1, 2], [{1: -0.5}, {2: -0.25}])
    assert divergence(first, first, 0.1) is None
    assert mean_logprob_drift(first, first) == 0


def test_a_divergence_between_nearly_tied_tokens_is_a_near_tie():
    first = answer([1, 2], [{1: -0.5}, {2: -0.70, 3: -0.75}])
    second = answer([1, 3], [{1: -0.5}, {2: -0.72, 3: -0.68}])
    parted = divergence(first, second, 0.1)
    assert parted is not None and parted.position == 1 and parted.near_tie


def test_a_token_outside_the_other_top_k_is_not_a_near_tie():
    first = answer([1, 2], [{1: -0.5}, {2: -0.70}])
    second = answer([1, 42], [{1: -0.5}, {42: 0.0, 2: -0.72}])
    parted = divergence(first, second, 0.1)
    assert parted is not None and not parted.near_tie and "not in top-5" in str(parted)


def test_a_shorter_answer_diverges_where_it_ends():
    parted = divergence(answer([1, 2], []), answer([1], []), 0.1)
    assert parted is not None and parted.position == 1 and not parted.near_tie


def test_the_cache_configuration_and_counters_are_read_with_the_prometheus_parser():
    on = prometheus.Reading(prometheus.parse(CACHE_INFO % "True"))
    assert prometheus.prefix_caching(on) is True
    assert prometheus.prefix_caching(prometheus.Reading(prometheus.parse(CACHE_INFO % "False"))) is False
    assert on.total("vllm:prefix_cache_hits") == 256.0
    assert prometheus.prefix_caching(prometheus.Reading(None, "no answer")) is None


BLOCKS_INFO = (
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="128",engine="0",num_gpu_blocks="%s",num_gpu_blocks_override="6"} 1.0\n'
)


def test_the_kv_cache_holds_its_blocks_less_the_null_block():
    expect = Expectations(contracts.load(), Version("0.32.0"), None)
    cache = kv_cache(prometheus.Reading(prometheus.parse(BLOCKS_INFO % "6")), expect)
    assert cache.tokens == 640 and "6 blocks of 128, 1 held back" in cache.described
    # The same reader gives discovery the size for the contract's claim (plugin/targets.py, preemptible_kv_cache).
    capacity = expect.fact("kv_cache_capacity")
    assert prometheus.kv_cache_size(prometheus.Reading(prometheus.parse(BLOCKS_INFO % "6")), capacity).tokens == 640
    assert prometheus.kv_cache_size(prometheus.Reading(None, "no answer"), capacity) is None
    unread = kv_cache(prometheus.Reading(prometheus.parse(BLOCKS_INFO % "None")), expect)
    assert unread.tokens is None and "num_gpu_blocks" in unread.described


def test_the_load_needs_twice_the_cache_or_is_not_sent():
    assert preemption_load(KvCache(640, ""), 504) == 3  # 1512 tokens for 640
    assert preemption_load(KvCache(100, ""), 504) == 2  # at least two, or nothing is at once
    assert preemption_load(KvCache(3000, ""), 504) == MOST_PREEMPTION_REQUESTS  # more than the cache, not twice
    assert preemption_load(KvCache(None, ""), 504) == MOST_PREEMPTION_REQUESTS  # the counter alone decides
    assert preemption_load(KvCache(504 * MOST_PREEMPTION_REQUESTS, ""), 504) is None  # a default server's
