"""The Kubernetes executor (issue 12): the ports' cluster adapters. What an attempt
becomes on a cluster is rendered by the pure ``taugrid.manifests`` (which ``tau render``
also uses, with no server); this package creates, watches and deletes those objects.
Only this package may import Kubernetes client libraries (import-linter)."""
