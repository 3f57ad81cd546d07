"""The serving-performance gate's machinery: the load generator, the run, the statistics, the verdicts' figures."""
