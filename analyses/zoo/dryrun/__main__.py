"""``python -m analyses.zoo.dryrun --child DEVICE``: one run measured in this fresh process, its
JSON on stdin (:func:`analyses.zoo.dryrun.measuring.run_isolated` starts it)."""

import sys

from analyses.zoo.dryrun.measuring import _child

if sys.argv[1:2] == ["--child"]:
    sys.exit(_child(sys.argv[1:]))
sys.exit("usage: python -m analyses.reproduce --paper --dry-run (this module's command "
         "line is its own child processes')")
