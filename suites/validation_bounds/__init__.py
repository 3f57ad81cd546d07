"""Validation errors stay small, fast and free of server internals; an oversized request body is refused."""
