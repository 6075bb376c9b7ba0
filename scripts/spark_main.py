"""The main file to hand to ``spark-submit``: ``spark-submit ... scripts/spark_main.py run ...``.

It lives outside the package on purpose: Python puts a main file's own folder first on
sys.path, and from inside ``src/leakproof`` the subpackages ``kafka`` and ``hbase`` would
shadow the kafka-python and happybase libraries.
"""

import sys

from leakproof.cli import main

if __name__ == "__main__":
    sys.exit(main())
