"""``python -m analyses.markov_holdout``."""

from analyses.markov_holdout import main

raise SystemExit(main())
