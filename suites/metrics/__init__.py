"""/metrics: Prometheus text that exports what the version promises and the dashboards query."""
