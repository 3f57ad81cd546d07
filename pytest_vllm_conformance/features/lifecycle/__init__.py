"""The server's life in managed mode: SIGTERM with streams in flight, as a rolling upgrade sends it (``drain.py``)."""
