"""Repository root: makes ``fixtures/`` importable by our own tests and keeps
pytest out of folders that hold no tests."""

collect_ignore = ["fixtures", "bench", "docs"]
