"""``python -m analyses.ngram_lookup``."""

from analyses.ngram_lookup import main

raise SystemExit(main())
