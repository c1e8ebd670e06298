"""``python -m analyses.memorization``: the command line (:mod:`analyses.memorization.cli`)."""

from analyses.memorization.cli import main

raise SystemExit(main())
