"""What a run becomes on Kubernetes, as plain objects: pure functions from a spec, a
policy and a run's identity to dicts (no client library, no I/O), so ``tau render``
prints them with no server and the Kubernetes executor creates exactly the same."""
