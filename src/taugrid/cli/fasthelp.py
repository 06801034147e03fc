"""``tau --help`` without importing click.

The top-level help is what people and scripts run most; importing click costs more than
the rest of the start-up together on a small machine. This renders the same text click
would, from the same command table; tests/unit/cli checks the two stay identical.
"""

from __future__ import annotations

from taugrid.cli.registry import COMMANDS

USAGE = "Usage: tau [OPTIONS] COMMAND [ARGS]..."
DESCRIPTION = [
    "Run GPU AI workloads from one tau.yaml.",
    "",
    "Quick start:",
    "  tau init              write a starter tau.yaml",
    "  tau run --wait        submit it and watch it finish",
    "  tau status            recent runs",
    "  tau logs RUN -f       follow a run's output",
]
OPTIONS = [
    ("--debug", "Show tracebacks for errors."),
    ("--context NAME", "Use this context's server and token (tau context list)."),
    ("--version", "Show the version and exit."),
    ("-h, --help", "Show this message and exit."),
]


def _definition_list(rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(name) for name, _ in rows)
    return [f"  {name.ljust(width)}  {text}" for name, text in rows]


def render() -> str:
    lines = [USAGE, ""]
    lines += [f"  {line}" if line else "" for line in DESCRIPTION]
    lines += ["", "Options:", *_definition_list(OPTIONS)]
    lines += ["", "Commands:", *_definition_list([(n, h) for n, (_, h) in COMMANDS.items()])]
    return "\n".join(lines) + "\n"


# click's group help is built from this text; "\b" keeps the quick-start block unwrapped.
CLICK_HELP = "\n".join(DESCRIPTION[:2]) + "\n\b\n" + "\n".join(DESCRIPTION[2:]) + "\n"
