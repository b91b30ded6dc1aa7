"""``histaudit keys``: create signing keys."""

from __future__ import annotations

import click

from histaudit.ledger.keys import generate_keypair

from .options import EXIT_CLEAN, TIMESTAMP


@click.group()
def keys() -> None:
    """Create signing keys."""


@keys.command("generate")
@click.option("--out", "out_dir", required=True, metavar="DIR", help="Directory for the pair.")
@click.option("--name", default="histaudit", show_default=True, help="File name stem.")
@click.option("--not-before", type=TIMESTAMP, help="Start of the key's validity window.")
@click.option("--not-after", type=TIMESTAMP, help="End of the key's validity window.")
def generate(out_dir: str, name: str, not_before: str | None, not_after: str | None) -> int:
    """Write NAME.key (mode 0600) and NAME.pub.json; print the key id."""
    priv, pub, signer = generate_keypair(out_dir, name=name, not_before=not_before,
                                         not_after=not_after)
    click.echo(f"key id {signer.kid}\nprivate {priv} (mode 0600, keep it secret)\npublic  {pub}")
    return EXIT_CLEAN
