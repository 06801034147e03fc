"""Open the web portal in a browser, logged in.

Prints the portal's address and opens a one-time link (good for 60 s) that logs the
browser in as you. With --url only that link is printed, for scripts and for a browser
on another machine; a link once used or expired is refused, so run it again.
"""

from __future__ import annotations

import click

from taugrid.cli.connect import connect


@click.command(name="portal", help=__doc__)
@click.option("--url", "url_only", is_flag=True, help="Print the login link only; open nothing.")
@click.option("--page", default="/portal/", help="The portal page to land on (a path).")
def command(url_only: bool, page: str) -> None:
    client = connect()
    link = client.call("POST", "/portal/link", json_body={"next": page})["url"]
    if url_only:
        click.echo(link)
        return
    click.echo(f"TauGrid portal: {client.base_url}/portal/")
    import webbrowser

    if not webbrowser.open(link):
        click.echo(f"no browser to open here; open this link within 60 s:\n{link}")
