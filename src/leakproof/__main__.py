"""``python -m leakproof``; for spark-submit use scripts/spark_main.py (see its docstring)."""

import sys

from leakproof.cli import main

if __name__ == "__main__":
    sys.exit(main())
