"""The training package: the one description of a run and its hash (:mod:`.runconfig`), building and
checking one (:mod:`.build`), the one loop with callbacks (:mod:`.loop`; its parts: the loss
:mod:`.loss`, evaluation and data :mod:`.evaluation`, checkpoints :mod:`.writer`, RNG state
:mod:`.rng`, :mod:`.callbacks`), ensembles of runs trained as one batched model
(:mod:`.ensemble`, cached by :mod:`.ensemble_cache`), what a run costs before it runs
(:mod:`.costs`, :mod:`.gpu_costs`, :mod:`.plan`), the checkpoint cache (:mod:`.cache`) and the
command line (:mod:`.cli`, ``python -m models.train``). The train section itself,
:class:`~models.train_config.TrainConfig`, sits below this package (in
:mod:`models.train_config`), so that :mod:`models.base` and :mod:`models.checkpoint` read it
without importing what trains; so does the level table and its generic rows
(:mod:`models.levels`; a paper's rows are its zoo module's), so that the zoo's recipes and an
analysis' level settings are read without it.

Import from the submodules (``from models.train.loop import train``).
"""
