"""Assert that a command's JSON output matches its published schema (``schemas/``)."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from support.repo import SCHEMAS

__all__ = ["valid", "validator"]


def _registry() -> Registry:
    """Every output schema by its ``$id``: they share the finding and report schemas."""
    docs = [json.loads(p.read_bytes()) for p in sorted(SCHEMAS.glob("*.output.schema.json"))]
    return Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in docs)


REGISTRY = _registry()


def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.output.schema.json").read_bytes())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=REGISTRY)


def valid(name: str, doc: Any) -> Any:
    """``doc`` after asserting it matches ``schemas/NAME.output.schema.json`` (every error
    listed, not only the first)."""
    errors = [f"{list(e.absolute_path)}: {e.message}"
              for e in validator(name).iter_errors(doc)]
    assert not errors, "\n".join(errors)
    return doc
