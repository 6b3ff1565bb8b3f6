"""`python3 -m faults`: one fault run (see `run.py`)."""

import sys

from .run import entry

sys.exit(entry())
