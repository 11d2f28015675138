"""`python -m benchmarks`: the timing suite (benchmarks/suite.py); `--help` lists its options."""

import sys

from benchmarks.suite import main

sys.exit(main())
