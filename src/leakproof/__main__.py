"""``python -m leakproof`` and the main file for ``spark-submit`` (see README: YARN)."""

import sys

from leakproof.cli import main

if __name__ == "__main__":
    sys.exit(main())
