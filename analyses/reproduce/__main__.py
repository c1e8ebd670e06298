"""``python -m analyses.reproduce``."""

import sys

from analyses.reproduce.cli import main

sys.exit(main())
