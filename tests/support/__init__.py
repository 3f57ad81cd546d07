"""What only tests/ shares (the schedule, the profiles, warm suite runs); bench/ and atlas/ use fixtures/ too."""
