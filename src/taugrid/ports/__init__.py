"""The control plane's ports: what it needs from whatever runs workloads and keeps their
files, stated once, with docstring contracts (docs/architecture.md, "Ports").

The server (engine, services) speaks only these types. ``executors.local`` implements
them for one machine; ``executors.kubernetes`` will for a cluster. Nothing here does I/O.
"""
