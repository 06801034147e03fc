"""The Kubernetes executor (issue 12): the ports' cluster adapters. So far the pure
renderers (``render.py``); the client, the watches and the executor come next. Only this
package may import Kubernetes client libraries (import-linter)."""
