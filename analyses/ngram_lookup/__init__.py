"""n-gram lookup with suffix and prefix keys, trained short and tested long (copy paper §3.5,
Figs. 5 and 6).

``python -m analyses.ngram_lookup ckpt.pt ...`` (or ``--train --level quick``): accuracy of
answering the k tokens that follow a key n-gram of the string, vs string length, for lookup
checkpoints (``tasks.lookup``). Suffix key (Fig. 5): the key comes after the string, so the model
must have kept the whole string — transformers generalise to long strings, GSSMs do not. Prefix
key (Fig. 6): the key comes first and a model can watch for it while reading — GSSMs do well.
Accuracy is string-level over the k answer tokens (one teacher-forced pass, exact).

Quick level: a Hard-ALiBi transformer and an LSTM, each fine-tuned on both key kinds (strings
of length 10..30) from the zoo's quick *copy* models (recipes ``lookup_{suffix,prefix}/{label}``,
which start from ``copy/{label}``), tested up to length 100. Why not from scratch as in the
paper: lookup supervises one answer token per example, and at quick budgets neither model
learns it from random init (``--init none`` trains the ``lookup_scratch_*`` recipes to see
it). The paper introduces lookup to probe "the mechanisms that the models use to copy";
starting from the copy models asks exactly that. ``--level paper``: NoPE, ALiBi, Hard-ALiBi, RoPE,
Mamba, LSTM from scratch with the paper's settings (GPU).

Medium level (``--level medium``): the prefix key only (Fig. 6), Hard-ALiBi, Mamba and LSTM from
random init as in the paper, several seeds each (recipes ``lookup_medium_prefix/{label}_s{seed}``;
analyses.zoo says which of the paper's training setting they match and why the rest differs),
tested up to length 100. The length claim reads two bands apart: just beyond the training length
(up to twice it) and the longest length; its text names the setting, field by field, as the
paper's or not (:data:`PAPER_SETTING`). A model's seeds are averaged and their range given; the
table adds each model's mean over its seeds at every length.
"""

from __future__ import annotations

import argparse
from statistics import fmean

from tqdm.auto import tqdm

from analyses import zoo
from analyses.claims import Claim, Figure
from analyses.common import (
    Checkpoint,
    load_model,
    need,
    run_analysis,
    to_jsonable,
)
from analyses.copy_models import COPY_ARCHS, label_for
from analyses.ngram_lookup.claims import (
    _by_model,
    claim_prefix,
    claim_prefix_length,
    claim_suffix,
    model_of,
)
from analyses.zoo import copy as zoo_copy
from analyses.zoo.copy import NGRAM_LOOKUP_LEVELS as LEVELS
from analyses.zoo.copy import NgramLookupSettings
from figures.style import COLORS, new_figure
from probes.copying import accuracy_at
from seqprobe.cli import add_fields, settings_from_args
from seqprobe.config import check, config_to_dict
from tasks.lookup import LookupConfig, NgramLookupTask

NAME = "ngram_lookup"
KEYS = ("suffix", "prefix")
FIG_OF_KEY = {"suffix": "5", "prefix": "6"}  # the copy paper's figure of each key
# the zoo's lookup models: "copy" = the level's recipes (quick: fine-tuned from the label's
# copy model), "none" = from random init at any level
INITS = ("copy", "none")


def lookup_recipes(level: str, labels: list[str] | None = None,
                   init: str | None = None) -> list[str]:
    """The zoo's lookup recipes of ``labels`` (default: the level's), both key kinds each:
    ``lookup_{key}/{label}`` (``init`` None or "copy"), ``lookup_scratch_{key}/{label}``
    ("none"); an unknown label is the zoo's unknown recipe."""
    check(init in (None, *INITS), f"init must be one of {', '.join(INITS)}, got {init!r}")
    labels = labels or list(LEVELS[level].labels)
    if level in ("medium", "large"):
        check(init != "copy", f"--init copy: the {level} lookup models train from random init")
        return (zoo_copy.lookup_medium_recipes(labels) if level == "medium"
                else zoo_copy.lookup_large_recipes(labels))
    stem = "lookup_scratch" if init == "none" else "lookup"
    names = [f"{stem}_{key}/{label}" for label in labels for key in KEYS]
    if init == "copy":
        check(all(level in zoo.recipe(n).init_from for n in names),
              f"--init copy: the {level} lookup models train from random init (the paper's "
              "setting); the copy models start them at --level quick only")
    return names


def compute(models: list[tuple[str, object, dict]], lengths: list[int], n_examples: int = 256,
            seed: int = 0, progress: bool = True) -> dict:
    """``models`` = [(label, model, lookup task config)]; accuracy vs length per key kind
    (string-level over the k answer tokens)."""
    check(all(L >= 2 for L in lengths), f"lengths must be >= 2, got {lengths}")
    curves: dict[str, dict] = {k: {} for k in KEYS}
    info: dict[str, dict] = {k: {} for k in KEYS}
    bar = tqdm(total=len(models) * len(lengths), desc=NAME, disable=not progress, leave=False)
    for label, model, cfg in models:
        model.eval()
        # the trained config, widened so that long test strings are allowed
        test_cfg = LookupConfig(**{**cfg, "max_len": max(cfg["max_len"], max(lengths))})
        task = NgramLookupTask(test_cfg)
        rows = []
        for L in lengths:
            if L < cfg["n"] + cfg["k"]:
                bar.update(1)
                continue
            rows.append({"L": L, **accuracy_at(model, task, L, n_examples, seed + L,
                                               example_len=L + 2 * cfg["n"] + 4)})
            bar.update(1)
        key = cfg["key"]
        while label in curves[key]:
            label += "'"
        curves[key][label] = rows
        train = model.provenance.train.get("config") or {}
        # the steps it trained (fewer than the config's cap where stop_at ended it early)
        done = model.provenance.step
        info[key][label] = {"n": cfg["n"], "k": cfg["k"], "min_len": cfg.get("min_len"),
                            "max_len": cfg["max_len"], "D": cfg.get("D"),
                            "steps": done or train.get("steps"), "seed": train.get("seed"),
                            "init_from": train.get("init_from") or None,
                            # how it trained, for the claim's "which setting is the paper's"
                            "context": train.get("context"), "schedule": train.get("schedule"),
                            "stop_at": train.get("stop_at")}
    bar.close()
    return to_jsonable({"lengths": lengths, "n_examples": n_examples, "seed": seed,
                        "curves": curves, "train": info})


def plot(result: dict):
    # a panel per key that has models (medium trains only prefix keys)
    keys = [k for k in KEYS if result["curves"][k]] or list(KEYS)
    fig, axes = new_figure(len(keys), width_per_panel=4.6, height=3.5)
    for ax, key in zip(axes, keys, strict=True):
        fig_no = FIG_OF_KEY[key]
        seeds = _by_model(result["curves"][key])
        for label, rows in result["curves"][key].items():
            t = result["train"][key][label]
            how = (f"copy model + {t['steps']} steps" if t.get("init_from")
                   else f"{t['steps']} steps" if t.get("steps") else "")
            n_seeds = len(seeds[model_of(label)])
            if n_seeds > 1:
                how = f"{n_seeds} seeds; first: {how}"
            seed = "'" in label  # a further seed of a model: its colour, one legend entry
            ax.plot([r["L"] for r in rows], [r["string_acc"] for r in rows], marker="o",
                    color=COLORS.get(model_of(label)), alpha=0.6 if seed else 1.0,
                    label="_nolegend_" if seed else f"{label} ({how})" if how else label)
        for i, v in enumerate(sorted({i["max_len"] for i in result["train"][key].values()})):
            ax.axvline(v, color="grey", ls=":", lw=1,
                       label="longest training string" if i == 0 else None)
        ax.set(xlabel="string length L", ylabel="lookup accuracy (k answer tokens)",
               ylim=(-0.02, 1.02), title=f"{key}-key n-gram lookup (Fig. {fig_no})")
        if result["curves"][key]:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, f"no {key}-key models here", ha="center", transform=ax.transAxes)
    return fig


def table(result: dict) -> list[list]:
    rows = [["key", "model"] + [f"L={L}" for L in result["lengths"]]]
    for key in KEYS:
        for label, r in result["curves"][key].items():
            by_L = {x["L"]: x["string_acc"] for x in r}
            rows.append([key, label] + [by_L.get(L, "-") for L in result["lengths"]])
        for label, curves in _by_model(result["curves"][key]).items():
            if len(curves) < 2:
                continue  # a row for the mean of a model's seeds
            accs = {L: [x["string_acc"] for c in curves for x in c if x["L"] == L]
                    for L in result["lengths"]}
            rows.append([key, f"{label} (mean of {len(curves)} seeds)"]
                        + [fmean(accs[L]) if accs[L] else "-" for L in result["lengths"]])
    return rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default=None,
                   help=f"with --train: which of {', '.join(zoo_copy.COPY_MODELS)} (default: level's)")
    p.add_argument("--init", choices=INITS, default=None,
                   help="with --train: fine-tune each model's copy checkpoint (quick's "
                   "default), or train from random init (paper's default)")
    add_fields(p, NgramLookupSettings, levels=True)


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    need(checkpoints, "lookup checkpoints")
    models = []
    for c in checkpoints:
        m = load_model(c.path, archs=COPY_ARCHS, device=args.device, tasks=("lookup",))
        models.append((label_for(m), m, config_to_dict(m.require_task(NAME).cfg)))
    s = settings_from_args(LEVELS[args.level], args)
    result = compute(models, list(s.lengths), s.n_examples, args.seed)
    result["checkpoints"] = [c.path for c in checkpoints]
    result["level"] = args.level  # the medium claim reads only its own level's results
    return result


# what each level trains against the paper (the index's scale line)
SCALE = {
    "quick": "prefix lookup fine-tuned from the quick copy models",
    "medium": "prefix lookup over 8 letters, strings 5-20, 2 seeds",
    "large": "prefix lookup over 26 letters, strings 5-30 packed to 420, 2 seeds",
}
FIGURE = Figure(
    "n-gram lookup, suffix and prefix keys", "Copy paper Figs. 5, 6",
    (Claim("suffix key: transformers beat GSSMs on strings longer than trained on (Fig. 5)",
           claim_suffix),
     Claim("prefix key: GSSMs do as well as the Hard-ALiBi transformer (Fig. 6)",
           claim_prefix),
     Claim("prefix key: GSSMs length-generalise near-perfectly (Fig. 6, medium)",
           claim_prefix_length)),
    recipes=lookup_recipes, levels=("quick", "medium", "large", "paper"), scale=SCALE.get,
    paper_scale="lookup strings <= 30 over 26 letters trained 15 epochs")


def main(argv=None) -> int:
    return run_analysis(
        NAME, __doc__, argv, compute=_compute, plot=plot, table=table, figure=FIGURE,
        add_arguments=add_arguments, threads=4,
        recipes=lambda a: lookup_recipes(a.train, a.models.split(",") if a.models else None,
                                         a.init))
