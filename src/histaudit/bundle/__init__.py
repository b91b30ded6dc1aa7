"""Compliance export bundles: writing them, verifying them offline, the HTML report.

``envelope``  names, versions and encodings both sides share (DSSE, base64)
``export``    :func:`export`: a bundle of whole chains from an open ledger
``verify``    :func:`verify_bundle`: offline, from the bundle's bytes and a trust store
``html``      the one-file human report inside a bundle

Importing this package imports neither side: ``from histaudit.bundle.verify import
verify_bundle`` loads no database driver.
"""
