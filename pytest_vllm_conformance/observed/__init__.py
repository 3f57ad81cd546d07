"""What a server was observed to do (its observed profile): captured, diffed against a baseline's, compared across
a fleet's replicas.

The word is kept apart from the serving profile a user declares (``catalogue/serving_profile.py``): an observed
profile records what one server did, a serving profile what the deployment promises. It holds the observations the
capture makes (the rendering corpus, a bare request's defaults, the wire's extension fields, the tokenizer, the
metric names), which the rendering and wire suites read too, and the machinery of the profile_diff and fleet suites.
"""
