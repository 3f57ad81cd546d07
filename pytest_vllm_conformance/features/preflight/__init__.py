"""The lint of deployment files against what each vLLM version removed or deprecated."""
