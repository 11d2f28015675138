"""`python -m purejaxppo ...` is the `purejaxppo` command."""

import sys

from purejaxppo.experiments.cli import main

sys.exit(main())
