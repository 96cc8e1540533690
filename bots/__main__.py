"""`python -m botweave`: the command line, which lives with the runtime that it starts."""

import sys

from botweave.runtime.cli import main

sys.exit(main())
