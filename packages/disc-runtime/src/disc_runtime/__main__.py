"""``python -m disc_runtime`` is ``disc-run``."""

import sys

from .cli import main

sys.exit(main())
