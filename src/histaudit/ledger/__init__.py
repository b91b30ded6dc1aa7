"""The ledger: records, keys, the append rule, the store, the Merkle tree and checkpoints.

The bottom layer of histaudit: it imports nothing from the rest of the package except
:mod:`histaudit.errors`. Modules, from the bottom up:

``canonical``   canonical JSON bytes (RFC 8785 on histaudit's domain)
``records``     entry and head bodies, stored rows, payload commitments (parse and build)
``kinds``       every entry kind, one ``StrEnum``
``keys``        Ed25519 keys, trust stores, batch verification (the key-file signer)
``pkcs11``      the signer whose key is in a PKCS#11 token (an HSM, SoftHSM2)
``transit``     the signer whose key is in a Vault/OpenBao transit engine (a key service)
``signers``     which of the three a ``--key`` names
``merkle``      the RFC 9162 tree over every entry, proofs
``checkpoint``  signed checkpoint notes (C2SP tlog-checkpoint, signed-note)
``spans``       what an OpenTelemetry span says of its signed entry; a bundle's spans.json
``store``       SQL only (a package): schema and triggers, SQLite files, consistent read
                snapshots, locks, rows in and out (SQLite, PostgreSQL), outages
``chain``       the append rule, erasure and checkpoint making, inside a store transaction
``writer``      group commit: appends from many threads share a transaction and an fsync
``retention``   erasing payloads past a policy's term, never one on hold
``timeline``    an instance's entries as a person reads them (``show``, the reports)

``store``, ``chain``, ``writer`` and ``retention`` import SQLAlchemy; nothing else here
does, so a verifier that holds rows (a bundle) never loads a database driver.
"""
