"""Speed and memory benchmarks writing JSON (``python -m bench`` runs them all into
``results.json``; ``bench_cuda.py`` and ``gpu_check.py`` on a GPU)."""
