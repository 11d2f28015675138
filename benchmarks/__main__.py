"""`python -m benchmarks`: the timing suite (the harness, benchmarks/harness.py, running the cases of
benchmarks/cases.py); `--help` lists its options."""

import sys

from benchmarks import returns
from benchmarks.cases import CASES
from benchmarks.harness import main

if __name__ == "__main__":  # importing this module (tests/test_bench_suite.py) runs nothing
    if returns.asked(sys.argv[1:]):  # hours of training, not a timing: its own runner (benchmarks/returns.py)
        sys.exit(returns.main(sys.argv[1:]))
    sys.exit(main(sys.argv[1:], CASES))
