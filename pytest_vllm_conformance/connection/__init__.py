"""Reaching the server: secrets, the bounded client, the launcher, discovery and the run lock."""
