"""Reproduce every figure: ``python -m analyses.reproduce --level quick`` (or ``--level paper`` on a
GPU).

``--level medium`` runs the analyses that have a medium level (``FIGURE.levels``): CPU-sized still,
but large enough that both sides of each headline comparison learn; its outputs and index go
to ``figures/out/medium`` unless ``--out`` says otherwise. ``--level large`` runs the
analyses that have a large level: the smallest settings that decide each headline claim, for
one machine with one GPU and 16 CPU cores, small models side by side (where each analysis and
its training run, GPU or CPU cores: :data:`~analyses.reproduce.plan.PLACEMENT`); outputs in
``figures/out/large``.

The plan is the ordered list :data:`~analyses.reproduce.plan.PLAN` of analysis names; each
analysis module says what it needs in its ``FIGURE`` (title, paper, claims, the zoo recipes it
trains). The runner turns the plan into jobs (:class:`~analyses.reproduce.plan.Job`: one
process each) — one per zoo recipe not yet cached (``python -m analyses.zoo train NAME``), one
per analysis, each analysis after the recipes it reads, each recipe after the one it is
fine-tuned from — and runs them on the suite's one runner (:mod:`seqprobe.sweep.commands`,
beside the sweeps' :func:`~seqprobe.sweep.map_jobs`; a failure is reported, the rest still
run). It prints the estimated wall time before the first job starts and keeps
it on the progress bar (:mod:`.eta`), and writes ``figures/out/index.md`` and ``index.html``
(:mod:`.index`): figure by figure, the paper's claim beside the number measured here and
whether it holds. Exit code 1 if any analysis failed.

``--dry-run`` trains nothing and runs no analysis: every model the plan would train (the zoo
recipes of its analyses and the models they train themselves) is built at its real size and
takes two optimizer steps (:mod:`analyses.zoo.dryrun`); a table of sizes, step times and
projected H100 hours is printed and written to ``OUT/dry_run.json``. Exit code 1 if any model
cannot run.

The parts: :mod:`.plan` (the plan, its jobs and their order), :mod:`.eta` (each job's
estimate; the packing and learning are :mod:`seqprobe.sweep.eta`'s), :mod:`.index` (claims,
timings, the index, and the run's outcomes), :mod:`.cli`.
"""
