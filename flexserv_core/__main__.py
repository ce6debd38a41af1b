"""``python -m flexserv_core`` is ``flexserv``."""

import sys

from flexserv_core.cli.main import main

sys.exit(main())
