"""histaudit installs beside an agent stack without a module of one overwriting another's.

dapr-agents brings in mistralai, which brings in jsonpath-python: a top-level ``jsonpath``
module. histaudit's JSONPath library used to be python-jsonpath, with the same top-level
name; installed together, one overwrote the other and ``crashtest --ignore`` died with an
ImportError. The test environment installs jsonpath-python (pyproject's ``test`` extra),
so this file — and every ``--ignore`` test of the suite — runs beside it. Cost: < 1 s.
"""

from __future__ import annotations

import collections
import importlib.metadata as md
from pathlib import Path

from histaudit.crashtest.ignore import without_paths
from support.cli import cli, one_error_line


def _top_level_owners() -> dict[str, set[str]]:
    """Each top-level module or regular package -> the distributions whose files hold it
    (namespace packages, which several may share by design, have no ``__init__.py``)."""
    owners: dict[str, set[str]] = collections.defaultdict(set)
    for dist in md.distributions():
        for file in dist.files or ():
            parts = file.parts
            if not parts or parts[0].startswith("..") or parts[0] == "__pycache__" \
                    or parts[0].endswith((".dist-info", ".egg-info", ".data")):
                continue
            if len(parts) == 1 and parts[0].endswith((".py", ".so")):
                owners[parts[0].split(".")[0]].add(dist.metadata["Name"])
            elif len(parts) == 2 and parts[1] == "__init__.py":
                owners[parts[0]].add(dist.metadata["Name"])
    return owners


def test_the_clashing_jsonpath_module_is_installed_here() -> None:
    import jsonpath

    assert "jsonpath-python" in _top_level_owners()["jsonpath"]
    assert not hasattr(jsonpath, "JSONPathEnvironment")  # not python-jsonpath's module


def test_no_two_installed_distributions_hold_the_same_top_level_module() -> None:
    shared = {name: sorted(dists) for name, dists in _top_level_owners().items()
              if len(dists) > 1}
    assert shared == {}


def test_ignore_paths_work_beside_it(tmp_path: Path) -> None:
    import jsonpath  # the agent stack's module, loaded first as in a user's process

    del jsonpath
    value = {"id": "a-1", "items": [{"at": 1}, {"at": 2, "n": 3}]}
    assert without_paths(value, ["$.id", "$.items[*].at"]) == {"items": [{}, {"n": 3}]}
    r = cli("crashtest", "app:wf", "--input", "{}", "--ignore", "$.a[", cwd=tmp_path)
    one_error_line(r, "--ignore '$.a['", "RFC 9535")
