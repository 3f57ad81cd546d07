"""The engine_invariants room's judgements on recorded answers, and the cache configuration read from /metrics.

Its greedy comparison is the package's (tests/unit/test_greedy_answers.py)."""

from packaging.version import Version

from pytest_vllm_conformance.catalogue import contracts
from pytest_vllm_conformance.catalogue.applicability import MOST_PREEMPTION_REQUESTS
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.protocol import prometheus
from suites.engine_invariants.invariance import KvCache, kv_cache, preemption_load

CACHE_INFO = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="128",enable_prefix_caching="%s",engine="0"} 1.0\n'
    "# TYPE vllm:prefix_cache_hits_total counter\n"
    'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 256.0\n'
)


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
