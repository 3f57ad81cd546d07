"""A server's observed profile: captured, diffed against another, and compared across a fleet's replicas.

A profile is made of what the feature rooms observe (rendering, generation
defaults, wire extensions, the tokenizer, the metric names), so this room sits
on the floor above them; it is the room of the profile_diff and fleet suites.
"""
