"""The server's start-up log: no finding the profile fails on, a start that reached ready, no phase grown slower."""
