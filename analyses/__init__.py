"""One module per question; each is a CLI: ``python -m analyses.NAME CKPT...``."""
