"""One module per verb; each exposes ``command``. See :mod:`taugrid.cli.registry`."""
