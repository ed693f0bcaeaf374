"""``python -m capgeo_callbacks.analyze``: the offline-analysis command line, now
:mod:`capgeo_callbacks.offline` (kept so the documented command keeps working)."""

import sys

from capgeo_callbacks.offline.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
