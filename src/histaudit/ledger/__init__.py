"""The ledger: records, keys, the append rule, the store, the Merkle tree and checkpoints.

The bottom layer of histaudit: it imports nothing from the rest of the package except
:mod:`histaudit.errors`. Modules, from the bottom up:

``canonical``   canonical JSON bytes (RFC 8785 on histaudit's domain)
``records``     entry and head bodies, stored rows, payload commitments (parse and build)
``kinds``       every entry kind, one ``StrEnum``
``keys``        Ed25519 keys, trust stores, batch verification (the only signing code)
``merkle``      the RFC 9162 tree over every entry, proofs
``checkpoint``  signed checkpoint notes (C2SP tlog-checkpoint, signed-note)
``store``       SQL only (a package): schema and triggers, SQLite files, consistent read
                snapshots, locks, rows in and out (SQLite, PostgreSQL)
``chain``       the append rule, erasure and checkpoint making, inside a store transaction

``store`` and ``chain`` import SQLAlchemy; nothing else here does, so a verifier that
holds rows (a bundle) never loads a database driver.
"""
