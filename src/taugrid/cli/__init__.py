"""The ``tau`` command line: a thin client of the server's HTTP API."""
