"""The server says what it is (/version, /v1/models), serves its core routes and generates once ready."""
