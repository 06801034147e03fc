"""Executors: turn an admitted run attempt into running processes (local) or objects."""
