"""The files the daprd stack writes for daprd and sentry (:mod:`.daprd`): the actor state
store component (SQLite or PostgreSQL) and the two Configurations of history signing. Kept
apart from the process code; each is a ``str.format`` template where it has a blank.
"""

from __future__ import annotations

__all__ = ["PG_STATESTORE", "SENTRY_CONFIG", "SIGNING_CONFIG", "STATESTORE"]

STATESTORE = """\
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: statestore
spec:
  type: state.sqlite
  version: v1
  metadata:
    - name: connectionString
      value: "{db}"
    - name: actorStateStore
      value: "true"
"""

PG_STATESTORE = """\
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: statestore
spec:
  type: state.postgresql
  version: v1
  metadata:
    - name: connectionString
      value: "{conninfo}"
    - name: actorStateStore
      value: "true"
"""


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
