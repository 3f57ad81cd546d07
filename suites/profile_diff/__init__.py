"""What changed since a captured baseline: the observed profile compared, one test per difference."""
