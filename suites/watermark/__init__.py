"""Sampled output carries the declared watermark, and no caller can opt out of it past the ingress."""
