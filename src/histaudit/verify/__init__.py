"""Verification: pure checks over rows it is given, and the reports they make.

``findings``     finding codes, severities and groups (the one table of them)
``report``       the frozen :class:`Report`, with its scope (instance, ledger, bundle)
``check``        the :class:`ChainCheck` protocol and the one loop that feeds checks
``scan``         the same loop for one chain, cheap for rows that are plainly well-formed
``integrity``    bytes, parsing, sequence, links, leaves, the signed head
``signatures``   keys in the trust store and their windows; Ed25519 over exact bytes
``parallel``     full mode's signatures and canonical form on worker processes
``payloads``     stored payloads against their salted commitments
``behaviour``    what crashes did: re-executions, duplicate or uncertain side effects
``behaviour_events`` / ``behaviour_spill``  its events in memory, or on disk past a bound
``crosscheck``   the engine's own history against the signed completions
``consistency``  the ledger against a kept checkpoint (rollback, fork, deletion)
``verifier``     :func:`verify_chain` composing the checks; ``verify_instance``/``_all``

Nothing here imports the store or the Dapr SDK at module level: a bundle verifies
without a database driver.
"""

from .findings import CODES, Finding, Group, Severity
from .report import Report, Scope
from .verifier import verify_all, verify_chain, verify_instance

__all__ = ["CODES", "Finding", "Group", "Report", "Scope", "Severity", "verify_all",
           "verify_chain", "verify_instance"]
