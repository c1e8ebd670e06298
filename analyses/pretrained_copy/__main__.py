"""``python -m analyses.pretrained_copy``."""

from analyses.pretrained_copy import main

raise SystemExit(main())
