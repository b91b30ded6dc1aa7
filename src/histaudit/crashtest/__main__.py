"""``python -m histaudit.crashtest worker --app MODULE_OR_FILE``: one crash-matrix worker."""

import sys

from .matrix import main

sys.exit(main())
