"""Memorization capacity against parameter count (Kim et al., §5, Figs. 1 and 2, App. F).

``python -m analyses.memorization --data synthetic --labels-per token --level quick --out DIR``
``[--jobs N] [--ray [ADDRESS]] [--retries R]``: the cells run in N local worker processes, or
on Ray (:mod:`seqprobe.sweep`) on a Ray instance started here or an existing cluster;
finished cells are saved and never run again, a cell that fails on every attempt is marked in
the JSON (``cells_failed``) and the exit code is 1 while the others land.

A grid over dataset size (fractions 10 %, 20 %, …, 100 % of N, App. F) × model width (the
embedding size m; L layers, h heads, head size k = m / h, feed-forward q = 4m, §5.1); every
cell trains an encoder transformer from scratch on the fixed training set until it memorises
it (training error < ``threshold``), its training error stops improving for ``patience``
evaluations (App. F: "the training error does not improve"), or the step budget runs out.

* Fig. 1 (``NAME_heatmap.png``): the training error of every cell.
* Fig. 2 (``NAME_params.png``): for each N, the parameter count of the smallest width with
  training error < 0.005 (App. F), with a least-squares linear trend and the theory's shape
  Õ(d + n + √(nN)) (Thm 3.1, token level) or Õ(d + n + √N) (Thm 4.1, sequence level), fitted
  as a + b·√(nN) (resp. a + b·√N): the constant a stands for d + n, the log factors are dropped
  (:mod:`probes.fits`).
* ``NAME.png`` (both panels), ``NAME.json`` (every number), ``NAME_cells.csv`` (one row per
  cell) and ``NAME_cells/*.json`` (one file per finished cell, so a stopped sweep resumes).
  NAME is ``memorization_{data}_{task}``, so token and sequence grids share an output folder.

Medium (``--level medium``): Fig. 2 as a test of its shape. The quick grid has five
N over 5x, too few to tell √(nN) from a line; the medium grid (``GRIDS``' ``search`` row) takes
nine N over 32x and, instead of training every (N, width) cell, searches each N for the
smallest memorising width (:func:`search_min_width`: galloping from a guess, then bisection;
each cell stops as soon as it memorises), once per seed (``--seeds``, default the grid's:
data set and initialisation), the seeds as parallel tasks. Every N gets four times the quick
step budget: the smallest memorising width still falls with more steps, so the budget is long
and the same at every N.
Large (``--level large``): the search inverted (:mod:`.inverse`): for 8 widths over
~30x in parameters, the largest N each memorises, bisected over a ladder of nested N (8 a
doubling, to 4096), one search per (width, seed), 2 seeds; the same fits over the (N*, P)
points, so each point's parameter count is exact instead of a width step's.
Then, over every (N, seed) point: the linear and a + b·√(nN) fits and their residuals, the
exponent k of a + b·N^k with a bootstrap interval (the N resampled, then the seeds within
each: :func:`probes.fits.power_fit`), the same exponent over the smaller and the larger half of
the N, the log-log slope, and a verdict (:func:`shape_verdict`).

What the paper claims for Fig. 2 (§5.2) is a *linear* trend: "We observe a linear trend in the
number of parameters with a subtle concavity as our theory predicts, but only at the low data
regime", conjectured to come from "the fixed depth and bit complexity during the experiments"
(Thms B.1 / B.2: Õ(d + n + nN/L) parameters at depth Õ(L), Õ(d + n + nN/B) at bit complexity
Õ(B)). Thm 3.1's Õ(d + n + √(nN)) holds for its own construction (width 16, depth
Õ(n + √(nN)), bit complexity Õ(√(nN))), not for a fixed-depth model. The claims:
``claim_linear`` (the verdict is linear), ``claim_concave_small`` (k < 1 over the smaller N
only) and ``claim_sqrt`` (√(nN) fits better: context). Outputs: ``NAME_probes.png`` (every
cell the search trained) in place of the heatmap, ``NAME_params.png``, ``NAME_cells.csv``
(with the seed), ``NAME_cells/m*_n*_s*.json``.

Parameter counting: ``params_total`` is every trainable parameter (token embedding |V|·m,
the blocks, the final LayerNorm and the classifier head m·C + C); ``params_non_embedding``
leaves out the token embedding and the classifier head (``SuiteModel.n_params(embeddings=
False)``). Rotary position encoding has no parameters. Thm 3.1 counts the embedding as d
parameters; Fig. 2 of the paper does not say which count it plots, so both are reported.

Positions: the paper trains BERT, whose learned absolute position embeddings break
permutation equivariance — the setting of Thm 3.1.2 / 4.1.2 ("without permutation
equivariance", a positional encoding E added to the input). The suite's transformer has no
learned absolute positions, so the default is ``pe=rope``: positional information with no
extra parameters (the counts of Fig. 2 stay those of the blocks). ``--pe nope`` gives the
permutation-equivariant model of Thm 3.1.1 / 4.1.1; the synthetic data are generated with
distinct contexts and consistent labels (Def. 3.2) so that they satisfy its premises too.

Training: each cell is a run of the suite's one loop (``models.train.loop.train``, no
checkpoint file) with two changes that a memorization cell needs: the evaluation measures the
error on the *whole* training set (:func:`train_error_evaluator`, not sampled batches), and a
callback (:class:`StopRule`) ends the run at convergence, so most cells stop long before the
step budget. Minibatches are seeded epochs over the fixed set (the task's ``epoch``).

The package, one job a module: :mod:`.grid` (the GRIDS table, parameter count, each cell's
RunConfig), :mod:`.cells` (training one cell, the saved cells), :mod:`.search` (the medium
search), :mod:`.sweep` (running a grid or a search on a backend), :mod:`.stats`,
:mod:`.plots`, :mod:`.claims` (the paper's claims, ``FIGURE``) and :mod:`.cli` (the command
line, ``main``: this package imports none of it, so nothing it imports comes back here). The
settings of every level (the rows, the grids, the widths) are the paper's, in their one home
:mod:`analyses.zoo.memorization`.
"""

from analyses.memorization.claims import FIGURE

__all__ = ["FIGURE"]
