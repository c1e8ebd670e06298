"""``python -m analyses.ngram_heads``."""

from analyses.ngram_heads import main

raise SystemExit(main())
