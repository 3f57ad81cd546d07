"""What our own tests share besides fixtures: the servers, the profiles, reading verdicts by contract id."""
