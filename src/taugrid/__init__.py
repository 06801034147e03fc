"""TauGrid: run GPU AI workloads from one tau.yaml.

The workload SDK's public names, loaded on first use so that ``import taugrid`` (which
the CLI's start-up path also does) stays cheap::

    import taugrid
    with taugrid.checkpoint.saving(step) as d: ...   # taugrid.sdk.checkpoint
    taugrid.log(step, loss=0.3)                      # taugrid.sdk.metrics.log
    if taugrid.should_stop(): ...                    # taugrid.sdk.stop.should_stop
"""

__version__ = "0.1.0"
__all__ = ["__version__", "checkpoint", "log", "should_stop"]

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from taugrid.sdk import checkpoint
    from taugrid.sdk.metrics import log
    from taugrid.sdk.stop import should_stop


def __getattr__(name: str) -> object:
    if name == "checkpoint":
        from taugrid.sdk import checkpoint

        globals()[name] = checkpoint
        return checkpoint
    if name == "log":
        from taugrid.sdk.metrics import log

        globals()[name] = log
        return log
    if name == "should_stop":
        from taugrid.sdk.stop import should_stop

        globals()[name] = should_stop
        return should_stop
    raise AttributeError(f"module 'taugrid' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
