"""pytest wiring: hooks, fixtures, options, the run's state, the reporter and the command line."""
