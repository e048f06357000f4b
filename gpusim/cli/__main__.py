"""``python -m gpusim.cli``: the same as the ``gpusim`` console script."""

import sys

from . import main

sys.exit(main())
