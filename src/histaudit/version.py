"""histaudit's version, the installed distribution's (pyproject.toml says it once).

A leaf: it imports nothing of histaudit, so what needs the version (the CLI's
``--version``, a compliance report) does not pull in the package's public face.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("histaudit")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
