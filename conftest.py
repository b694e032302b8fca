"""pytest configuration shared by unit tests (beside the code) and tests/."""

import os

# keep numba's on-disk cache inside the checkout's build dir when running tests
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.path.dirname(__file__), ".numba_cache"))

# every lowering in the tests is verified against the executable's rules (corefold.backend.lower.CHECK_ENV)
os.environ.setdefault("COREFOLD_CHECK_EXECUTABLES", "1")
