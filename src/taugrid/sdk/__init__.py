"""The workload SDK: what a training script imports (``import taugrid``).

``taugrid.sdk.checkpoint`` (crash-safe checkpoints), ``taugrid.sdk.metrics`` (``log``) and
``taugrid.sdk.stop`` (``should_stop``). Stdlib only, never talks to the server: it writes
files the server reads. Each submodule loads only when used.
"""
