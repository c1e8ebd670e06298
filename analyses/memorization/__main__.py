"""``python -m analyses.memorization``: the command line (:mod:`analyses.memorization.cli`)."""

from analyses.memorization.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
