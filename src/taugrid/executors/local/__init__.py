"""Local executor: code snapshots, the per-run supervisor and process control.

Kept import-free on purpose: the supervisor runs as a module of this package and every
import here would add to the submit-to-running latency.
"""
