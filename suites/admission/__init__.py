"""Admission control: within the declared queue bound served, a burst past it refused fast with 503."""
