"""``python -m histaudit.cli``: the ``histaudit`` command."""

from . import main

main()
