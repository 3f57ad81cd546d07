"""A fleet's replicas: every one answers, and they serve alike; the odd one out named."""
