"""The control plane: FastAPI app, run service and the engine loop."""
