"""``python -m histaudit.crashtest worker --app MODULE_OR_FILE``: one crash-matrix worker."""

import sys

from .worker import main

sys.exit(main())
