"""Deployment files (manifests, Helm, .env, Dockerfiles, scripts) use nothing the target vLLM version removed."""
