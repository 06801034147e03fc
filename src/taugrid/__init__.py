"""TauGrid: run GPU AI workloads from one tau.yaml.

This module stays import-light: workloads import it (the SDK lands here later) and the
CLI's start-up path passes through it.
"""

__version__ = "0.1.0"
