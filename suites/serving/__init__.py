"""How the server serves under load (success, latency, occupancy, throughput, capacity), and what measures it."""
