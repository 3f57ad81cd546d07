"""Engine invariants: a greedy answer is the same from the prefix cache, inside a burst, and after a cancel."""
