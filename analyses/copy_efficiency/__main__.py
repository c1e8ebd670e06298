"""``python -m analyses.copy_efficiency``."""

from analyses.copy_efficiency import main

raise SystemExit(main())
