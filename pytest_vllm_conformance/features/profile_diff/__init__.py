"""The serving profile a capture observes, and its differences from a baseline."""
