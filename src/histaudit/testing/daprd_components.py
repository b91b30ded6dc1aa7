"""The files the daprd stack writes for daprd and sentry (:mod:`.daprd`): state store
components (the actor store on SQLite or PostgreSQL, and any other a test or an agent
needs) and the two Configurations of history signing. Kept apart from the process code.
"""

from __future__ import annotations

__all__ = ["SENTRY_CONFIG", "SIGNING_CONFIG", "state_store"]

def state_store(name: str, kind: str, connection: str, *, actor_store: bool = False) -> str:
    """A Dapr state store component named ``name``, of ``kind`` (``state.sqlite``,
    ``state.postgresql``) on ``connection`` (a file, a libpq string: no double quote);
    ``actor_store`` makes it the one daprd keeps workflow state in."""
    actor = '    - name: actorStateStore\n      value: "true"\n' if actor_store else ""
    return f"""\
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: {name}
spec:
  type: {kind}
  version: v1
  metadata:
    - name: connectionString
      value: "{connection}"
{actor}"""


SENTRY_CONFIG = """\
apiVersion: dapr.io/v1alpha1
kind: Configuration
metadata:
  name: daprsystem
spec:
  mtls:
    enabled: true
"""

SIGNING_CONFIG = """\
apiVersion: dapr.io/v1alpha1
kind: Configuration
metadata:
  name: histaudit-signing
spec:
  features:
    - name: WorkflowHistorySigning
      enabled: true
"""
