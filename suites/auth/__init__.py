"""The API key guards every route it should, through the ingress too; only declared-public routes answer without it."""
