"""Every ``tau`` command, by name, with the module that defines it.

The top-level help and shell completion need only names and one-line helps, so they
come from this table and no command module is imported until it runs. A test checks
that each entry's help matches its command's docstring.
"""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module under taugrid.cli.commands, one-line help)
    "run": ("run", "Submit a run from tau.yaml or a command line."),
    "rerun": ("rerun", "Submit a run again from its record, with more overrides."),
    "resume": ("resume", "Resume a finished run from its newest good checkpoint."),
    "status": ("status", "Show recent runs, or one run in detail."),
    "list": ("listing", "List runs with filters."),
    "logs": ("logs", "Print or follow a run's logs."),
    "metrics": ("metrics", "Print a run's metrics as a table or CSV."),
    "diff": ("diff", "Compare two runs: spec, code, environment, overrides."),
    "cancel": ("cancel", "Cancel runs: SIGTERM, grace period, then SIGKILL."),
    "get": ("get", "Download the files a run wrote, or a checkpoint."),
    "queues": ("queues", "Show queues: quota, usage, pending and running runs."),
    "gpus": (
        "gpus",
        "Show GPUs: health, what is out of service and why, what runs where.",
    ),
    "health": ("health", "Run the GPU health agent of a cluster node."),
    "validate": ("validate", "Check a tau.yaml without submitting it."),
    "render": ("render", "Print the Kubernetes objects a run would create."),
    "schema": ("schema", "Print the JSON Schema of tau.yaml."),
    "init": ("init", "Write a commented starter tau.yaml."),
    "secret": ("secret", "Manage secrets that runs get as environment variables."),
    "portal": ("portal", "Open the web portal in a browser, logged in."),
    "server": ("server", "Start, stop or inspect the local server."),
    "login": ("login", "Log in to a tau server and save it as a context."),
    "context": ("context", "List, show, switch and delete CLI contexts."),
    "admin": (
        "admin",
        "Platform administration: policy, workspaces, users, tokens, audit.",
    ),
    "version": ("version", "Print the version of tau."),
}
