"""``python -m flows.cli``: the ``rts`` command without its console script (as before the CLI became a package)."""

import sys

from flows.cli.main import main

sys.exit(main())
