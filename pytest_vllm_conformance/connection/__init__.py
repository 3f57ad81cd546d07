"""Reaching the server: secrets, the bounded client, the launcher, discovery (the server's facts, built once), the
live baseline and the run lock."""
