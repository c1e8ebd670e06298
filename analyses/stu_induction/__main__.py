"""``python -m analyses.stu_induction``."""

from analyses.stu_induction import main

raise SystemExit(main())
