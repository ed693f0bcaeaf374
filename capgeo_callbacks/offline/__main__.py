"""``python -m capgeo_callbacks.offline``: see :mod:`capgeo_callbacks.offline.cli`."""

import sys

from capgeo_callbacks.offline.cli import main

sys.exit(main())
