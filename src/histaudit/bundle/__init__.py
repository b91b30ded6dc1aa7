"""Compliance export bundles: writing them, verifying them offline, the HTML report.

``envelope``        names, versions and encodings both sides share (DSSE, base64)
``export``          :func:`export`: a bundle of whole chains from an open ledger
``staging``         its files written beside the target, moved in with its checkpoint
``prove``           OpenTelemetry spans to a bundle proving the entries they name
``verify``          :func:`verify_bundle`: offline, from the bundle's bytes and a trust store
``dapr_rows``       Dapr's signed workflow rows inside a bundle (the file format)
``dapr_state``      reading those rows from daprd's actor state store
``html``            the one-file human report inside a bundle, drawn from
``steps``, ``timeline_svg``, ``workflow_facts``  an instance's steps, its picture, its ending
``usage``, ``usage_html``  LLM calls, tokens and tool calls per run and per crash (also
                    ``histaudit show``), and their tables in the HTML pages
``compliance``      the period report (``histaudit report``): recorded, kept, erased, held

Importing this package imports neither side: ``from histaudit.bundle.verify import
verify_bundle`` loads no database driver.
"""
