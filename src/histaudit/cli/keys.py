"""``histaudit keys``: create signing keys, or export the public key of one held in a
PKCS#11 token."""

from __future__ import annotations

import click

from histaudit.ledger.keys import export_public_key, generate_keypair
from histaudit.ledger.signers import load_signer

from .options import EXIT_CLEAN, TIMESTAMP, key_option, run_settings


@click.group()
def keys() -> None:
    """Create signing keys, or export a token-held key's public key."""


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


@keys.command("export-public")
@key_option
@click.option("--out", "out_dir", required=True, metavar="DIR",
              help="Directory (a trust store) for NAME.pub.json.")
@click.option("--name", required=True, help="File name stem.")
@click.option("--not-before", type=TIMESTAMP, help="Start of the key's validity window.")
@click.option("--not-after", type=TIMESTAMP, help="End of the key's validity window.")
def export_public(key: str | None, out_dir: str, name: str, not_before: str | None,
                  not_after: str | None) -> int:
    """Write NAME.pub.json for the signing key (a pkcs11: URI, or a key file); print the
    key id. The private key stays where it is."""
    signer = load_signer(key, run_settings())
    pub = export_public_key(signer, out_dir, name=name, not_before=not_before,
                            not_after=not_after)
    click.echo(f"key id {signer.kid}\npublic  {pub}")
    return EXIT_CLEAN
