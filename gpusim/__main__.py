"""``python -m gpusim``: the same as the ``gpusim`` console script."""

import sys

from gpusim.cli import main

sys.exit(main())
