"""Memorization capacity against parameter count (Kim et al., §5, Figs. 1 and 2, App. F).

The command line (``python -m analyses.memorization``; the package's docstring says what it
computes): the flags, the outputs beyond NAME.png / NAME.json (each panel alone and the
per-cell CSV), the printed table and summary.
"""

from __future__ import annotations

import argparse
import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyses.common import Checkpoint, run_analysis
from analyses.memorization.claims import FIGURE, fit_summary
from analyses.memorization.grid import METHOD, NAME, THRESHOLD, dry_run_cells
from analyses.memorization.plots import (
    plot,
    plot_heatmap,
    plot_params,
    plot_probes,
    plot_search_params,
)
from figures.style import caption_text, new_figure, save_figure
from seqprobe import flags
from seqprobe.atomic import write_atomic
from seqprobe.cli import add_fields, add_workers_flag
from seqprobe.flags import (
    MAX_DIM,
    MAX_EXAMPLES,
    MAX_SEEDS,
    MAX_STEPS,
    STEPS_WHY,
    WIDTH_WHY,
    Config,
    bound,
)
from tasks.memorization import LABELS_PER, REAL_LABELS_PER

# What trains the cells (analyses.memorization.sweep and .inverse: models.train, the scheduler
# seqprobe.sweep) is imported in the functions that train or read a search's result: --help and
# the refusals read none of it.

CSV_FIELDS = ("fraction", "n_examples", "n_labels", "seq_len", "vocab_size", "n_classes",
              "d_model", "n_layers", "n_heads", "d_mlp", "pe", "params_total",
              "params_non_embedding", "train_error", "best_error", "memorized", "loss", "steps",
              "stop", "time_s")


def write_csv(result: dict, path: str | Path) -> Path:
    """One row per cell (a search's: with its seed)."""
    fields = ("seed", *CSV_FIELDS) if "search" in result else CSV_FIELDS
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    for cell in result["cells"]:
        w.writerow(cell)
    return write_atomic(path, text.getvalue())


def table(result: dict) -> list[list[Any]]:
    """Training error per N (rows) and width (columns), then the smallest memorising model;
    a search: per N, each seed's smallest memorising width and the parameter counts."""
    if result.get("search", {}).get("method") == METHOD:
        from analyses.memorization.inverse import table_max_n

        return table_max_n(result)
    if "search" in result:
        sr = result["search"]
        summ = sr["summary"]["non_embedding"]
        rows = [["N", "labels", *[f"m (seed {s})" for s in sr["seeds"]], "non-emb mean",
                 "sd", "total mean"]]
        for i, n in enumerate(result["n_examples"]):
            rows.append([n, result["n_labels"][i],
                         *[ms[i] if ms[i] is not None else "-" for ms in sr["min_width"]],
                         summ["mean"][i] if summ["mean"][i] is not None else "-",
                         summ["std"][i] if summ["std"][i] is not None else "-",
                         result["min_params_total"][i] or "-"])
        return rows
    rows = [["N \\ m", *result["widths"], "min m", "params", "non-emb"]]
    for i, n in enumerate(result["n_examples"]):
        rows.append([n, *[float(e) for e in result["error"][i]],
                     result["min_width"][i] or "-", result["min_params_total"][i] or "-",
                     result["min_params_non_embedding"][i] or "-"])
    rows.append(["params", *result["params_total"], "", "", ""])
    rows.append(["non-emb", *result["params_non_embedding"], "", "", ""])
    return rows


def _plot(result: dict):
    """Both panels (:func:`~.plots.plot`); the inverted search's Fig. 2 beside its probes."""
    if result.get("search", {}).get("method") != METHOD:
        return plot(result)
    from analyses.memorization.inverse import plot_max_n

    fig, (a, b) = new_figure(2, width_per_panel=4.5, height=3.6)
    plot_probes(result, a)
    plot_max_n(result, b)
    return fig


@dataclass(frozen=True)
class Settings(Config):
    """The grid's flags (each field is a flag: seqprobe.cli.add_fields); --steps and --jobs are the
    suite's shared flags."""

    widths: tuple[int, ...] | None = field(default=None, metadata=bound(
        1, MAX_DIM, WIDTH_WHY, help="embedding sizes m, e.g. 8,16,32 (default: the grid's)"))
    fractions: tuple[float, ...] | None = field(default=None, metadata=bound(
        0.0, 1.0, "fractions of the dataset", open_lo=True,
        help="dataset fractions (default 0.1,…,1.0)"))
    n_examples: int | None = field(default=None, metadata=bound(
        0, MAX_EXAMPLES, "N, the dataset; 0: the whole file",
        help="N, the full dataset size (0 with --data conll/mnli: every example of the file)"))
    threshold: float = field(default=THRESHOLD, metadata=bound(
        0.0, 1.0, "a probability", help="training error a cell must reach"))
    patience: int | None = field(default=None, metadata=bound(
        1, MAX_STEPS, STEPS_WHY, help="evaluations without improvement before a cell stops"))
    seeds: int | None = field(default=None, metadata=bound(
        1, MAX_SEEDS, "independently trained systems per point",
        help="medium: searches, one per seed --seed, --seed + 1, … (default: the grid's)"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", choices=["synthetic", "conll", "mnli"], default="synthetic")
    p.add_argument("--labels-per", choices=LABELS_PER, default=None,
                   help="a label per token or per sequence (default: token for synthetic and "
                   "conll, sequence for mnli)")
    p.add_argument("--task", dest="labels_per", choices=LABELS_PER, default=None,
                   help=argparse.SUPPRESS)  # its name before --labels-per (old command lines)
    p.add_argument("--data-path", default="", help="CoNLL-2003 file / MNLI train.tsv (or folder)")
    add_workers_flag(p, default=2, help="parallel worker processes, or the CPUs of the Ray "
                     "instance --ray starts here (default 2)")
    add_fields(p, Settings)
    p.add_argument("--steps", type=flags.flag("--steps"), default=None,
                   help="step budget per cell")
    p.add_argument("--pe", choices=["rope", "nope", "alibi", "hard_alibi"], default=None,
                   help="positional encoding (default rope: see the module docstring)")
    p.add_argument("--fresh", action="store_true", help="retrain cells saved by an earlier run")
    p.add_argument("--no-progress", action="store_true")


def _compute(args, _checkpoints: list[Checkpoint]) -> dict:
    """The grid of the flags (``--seed`` seeds the data and the training), and the outputs
    beyond NAME.png / NAME.json: each panel alone and the per-cell CSV. No checkpoints: the
    grid trains its own cells."""
    from analyses.memorization.inverse import plot_max_n
    from analyses.memorization.sweep import compute
    from seqprobe.sweep import backend_of

    labels_per = args.labels_per or REAL_LABELS_PER.get(args.data, "token")
    task_cfg: dict[str, Any] = {"seed": args.seed}
    if args.data_path:
        task_cfg["data_path"] = args.data_path
    if args.n_examples is not None:
        task_cfg["n_examples"] = args.n_examples
    train_cfg = {"seed": args.seed, **({"steps": args.steps} if args.steps else {})}
    result = compute(args.data, labels_per, args.level, args.out,
                     widths=args.widths,
                     fractions=args.fractions,
                     task_config=task_cfg, model={"pe": args.pe} if args.pe else None,
                     train=train_cfg, patience=args.patience, threshold=args.threshold,
                     n_jobs=args.workers, device=args.device, fresh=args.fresh,
                     progress=not args.no_progress,
                     backend=backend_of(args, args.workers, args.device), seeds=args.seeds)
    name, out = result["name"], Path(args.out)
    caption = caption_text(result, args.level, getattr(args, "seed", None))  # run's settings
    csv_path = write_csv(result, out / f"{name}_cells.csv")
    if "search" in result:
        save_figure(plot_probes(result), out / f"{name}_probes.png", caption)
        save_figure(plot_max_n(result) if result["search"].get("method") == METHOD
                    else plot_search_params(result), out / f"{name}_params.png", caption)
        print(f"wrote {out / (name + '_probes.png')}, {out / (name + '_params.png')}, "
              f"{csv_path}")
        print(f"{result['cells_trained']} cells trained ({result['train_cpu_s']} CPU-s), "
              f"{result['cells_reused']} reused, {result['wall_time_s']} s wall "
              f"({result['backend']}); {fit_summary(result)}")
        for c in result["cells_failed"]:
            print(f"search of seed {c['seed']}{' m=' + str(c['d_model']) if 'd_model' in c else ''}"
                  f" failed after {c['attempts']} attempt(s): "
                  f"{c['error']}")
        return result
    save_figure(plot_heatmap(result), out / f"{name}_heatmap.png", caption)
    save_figure(plot_params(result), out / f"{name}_params.png", caption)
    t = result["trends"]
    print(f"wrote {out / (name + '_heatmap.png')}, {out / (name + '_params.png')}, {csv_path}")
    print(f"{result['cells_trained']} cells trained, {result['cells_reused']} reused, "
          f"{result['wall_time_s']} s wall ({result['backend']}); Spearman(error, width) "
          f"{t['spearman_error_vs_width']}, Spearman(error, N) {t['spearman_error_vs_n']}, "
          f"Spearman(min params, N) {t['spearman_min_params_vs_n']}")
    for c in result["cells_failed"]:
        print(f"cell m={c['d_model']} f={c['fraction']} failed after {c['attempts']} "
              f"attempt(s): {c['error']}")
    return result


def main(argv=None) -> int:
    """Exit 0, or 1 when the outputs were written but some cells failed on every attempt
    (rerun to retry just those)."""
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=_plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, checkpoints=False,
                        dry_run_configs=lambda a: dry_run_cells(
                            a.train, a.data, a.labels_per or REAL_LABELS_PER.get(a.data, "token"),
                            {**({"data_path": a.data_path} if a.data_path else {}),
                             **({"n_examples": a.n_examples} if a.n_examples else {})}),
                        output_name=lambda args, result: result["name"],
                        failed_key="cells_failed")
