"""Test-wide settings."""

import os
import tempfile


def pytest_configure(config):
    # the command line's persistent compilation cache: one fresh folder for this test session,
    # shared by the processes the tests start, never the user's own cache
    os.environ["PUREJAXPPO_CACHE_DIR"] = tempfile.mkdtemp(prefix="purejaxppo-test-cache-")
