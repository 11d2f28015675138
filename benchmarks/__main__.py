"""`python -m benchmarks`: the timing suite (the harness, benchmarks/harness.py, running the cases of
benchmarks/cases.py); `--help` lists its options."""

import sys

from benchmarks.cases import CASES
from benchmarks.harness import main

sys.exit(main(sys.argv[1:], CASES))
