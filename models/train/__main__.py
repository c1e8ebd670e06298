"""``python -m models.train``."""

import sys

from models.train.cli import main

sys.exit(main())
