"""The entry in front of several replicas: it reaches each one, and keeps each replica's state reachable."""
