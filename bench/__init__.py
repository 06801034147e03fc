"""TauGrid benchmarks: ``python -m bench.<name>`` each, ``python -m bench.all`` for all.

Every headline is a ratio against a baseline measured in the same run on the same machine;
see docs/benchmarks.md for what each one measures and what it does not.
"""
