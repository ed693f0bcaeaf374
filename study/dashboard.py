"""Screenshots of a run's TensorBoard dashboard (the README's and docs/dashboard's pictures): the library's
``capgeo dashboard`` (:mod:`capgeo_callbacks.publish.screenshots`), kept runnable from the study as before.

    python -m study.dashboard RUN_DIR docs/dashboard     # custom_scalars.png, images.png, text.png
"""

from __future__ import annotations

import sys

from capgeo_callbacks.publish.screenshots import PAGES, main, screenshots

__all__ = ["PAGES", "main", "screenshots"]

if __name__ == "__main__":
    sys.exit(main())
