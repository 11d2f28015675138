"""`python -m benchmarks`: the timing suite (the harness, benchmarks/harness.py, running the cases of
benchmarks/cases.py); `--help` lists its options."""

import sys

from benchmarks import returns

if returns.asked(sys.argv[1:]):  # hours of training, not a timing: its own runner (benchmarks/returns.py)
    sys.exit(returns.main(sys.argv[1:]))

from benchmarks.cases import CASES  # noqa: E402
from benchmarks.harness import main  # noqa: E402

sys.exit(main(sys.argv[1:], CASES))
