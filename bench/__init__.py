"""The benchmarks: scripts that print figures (speed, memory, verdict stability), run as python -m bench.NAME."""
