"""Workflows for replay: deterministic ones, non-deterministic ones, and changed ("v2") code.

``workflows`` holds the code that recorded the golden histories in
``tests/golden/histories/``; ``v2`` holds later versions of ``order``, one per kind of
divergence ``histaudit replay`` reports. See README.md beside this file.
"""
