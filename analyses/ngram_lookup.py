"""n-gram lookup with suffix and prefix keys, trained short and tested long (copy paper §3.5,
Figs. 5 and 6).

``python -m analyses.ngram_lookup ckpt.pt ...`` (or ``--train quick``): accuracy of answering
the k tokens that follow a key n-gram of the string, vs string length, for lookup checkpoints
(``tasks.lookup``). Suffix key (Fig. 5): the key comes after the string, so the model must have
kept the whole string — transformers generalise to long strings, GSSMs do not. Prefix key
(Fig. 6): the key comes first and a model can watch for it while reading — GSSMs do well.
Accuracy is string-level over the k answer tokens (one teacher-forced pass, exact).

Quick preset (2 CPU cores, ≤ 10 minutes with training): a Hard-ALiBi transformer and an LSTM,
each fine-tuned on both key kinds (strings of length 10..30) from the quick *copy* checkpoints that
the copy analyses train (``--init copy``, the default here), tested up to length 100. Why not from
scratch as in the paper: lookup supervises one answer token per example, and at quick scale neither
model learns it from random init (measured, 2 CPU cores: 1500 steps each, Hard-ALiBi and Mamba,
string accuracy 0.02–0.29, mostly chance). The paper introduces lookup to probe "the mechanisms that
the models use to copy"; starting from the copy models asks exactly that. ``--paper``: NoPE,
ALiBi, Hard-ALiBi, RoPE, Mamba, LSTM from scratch with the paper's settings (GPU);
``--init none`` trains from scratch at any preset.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from analyses.common import base_parser, load_model, run_main, to_jsonable, write_outputs
from analyses.length_generalization import MODEL_SPECS, eval_batch_size, label_for
from analyses.ngram_heads import _ints
from figures.style import COLORS, new_figure
from models.generation import copy_accuracy, teacher_forced_argmax
from tasks.base import TaskError, check, make_generator

NAME = "ngram_lookup"
ARCHS = ("transformer", "mamba", "mamba2", "lstm", "stu")
KEYS = ("suffix", "prefix")
INITS = ("copy", "none")  # start from the label's copy checkpoint, or from random init
PRESETS = {
    "quick": {"labels": ["hard_alibi", "lstm"], "init": "copy",
              "task": {"min_len": 10, "max_len": 30, "n": 3, "k": 1},
              "train": {"steps": 500, "batch_size": 32, "lr": 1e-3, "warmup_steps": 50,
                        "weight_decay": 0.1, "schedule": "linear", "eval_every": 250,
                        "greedy_eval": False},
              "lengths": [10, 20, 30, 40, 60, 80, 100], "n_examples": 256},
    "paper": {"labels": ["hard_alibi", "nope", "alibi", "rope", "mamba", "lstm"], "init": "none",
              "task": {"min_len": 10, "max_len": 30, "n": 3, "k": 1},
              "train": {"lr": 5e-5, "warmup_steps": 300, "weight_decay": 0.1,
                        "schedule": "linear", "batch_size": 64, "steps": 20000,
                        "context": 420, "eval_every": 1000},
              "lengths": [10, 20, 30, 50, 75, 100, 150], "n_examples": 1280},
}


def train_lookup_models(preset: str, cache_dir: str, device: str,
                        labels: list[str] | None = None, progress: bool = True,
                        init: str | None = None) -> list[str]:
    """Train (cached) each label on both key kinds. ``"a|b"`` takes the first that builds;
    models whose arch does not build here are skipped with a printed note. ``init="copy"``
    (default: the preset's) fine-tunes the label's copy checkpoint of
    :mod:`analyses.length_generalization` (trained, or reused from the cache, first)."""
    from models.train import train_cached

    p = PRESETS[preset]
    init = init or p["init"]
    check(init in INITS, f"init must be one of {', '.join(INITS)}, got {init!r}")
    paths = []
    for spec in labels or p["labels"]:
        for label in spec.split("|"):
            check(label in MODEL_SPECS,
                  f"unknown model {label!r}; allowed: {', '.join(MODEL_SPECS)}")
            arch, model_cfg = MODEL_SPECS[label]
            train = dict(p["train"])
            if init == "copy":
                from analyses.length_generalization import train_models

                copy = train_models(preset, cache_dir, device, labels=[label], progress=progress)
                if label not in copy:
                    continue  # its arch does not build here (train_models said so)
                train["init_from"] = copy[label]  # its model config comes with it
            try:
                got = [str(train_cached(arch, "lookup", preset, cache_dir, model=model_cfg,
                                        task_config={**p["task"], "key": key},
                                        train_overrides=train, device=device,
                                        progress=progress)) for key in KEYS]
            except (TaskError, ImportError, AttributeError, NotImplementedError) as e:
                print(f"note: skipping {label} ({arch}): it does not build here "
                      f"({str(e).strip().splitlines()[0][:160]})")
                continue
            paths += got
            break
    return paths


@torch.no_grad()
def lookup_accuracy(model, task, L: int, n_examples: int, seed: int,
                    batch_size: int = 128) -> dict[str, float]:
    """String accuracy over the k answer tokens (teacher forced = greedy, exact)."""
    g = make_generator(seed)
    bs = eval_batch_size(L + 2 * task.cfg.n + 4, batch_size)
    s = c = 0.0
    done = 0
    while done < n_examples:
        b = min(bs, n_examples - done)
        batch = task.eval_batch(b, g, length=L).to(model.device)
        acc = copy_accuracy(teacher_forced_argmax(model, batch.prompts, batch.answers),
                            batch.answers)
        s, c, done = s + acc["string_acc"] * b, c + acc["char_acc"] * b, done + b
    return {"acc": s / done, "char_acc": c / done}


def compute(models: list[tuple[str, object, dict]], lengths: list[int], n_examples: int = 256,
            seed: int = 0, progress: bool = True) -> dict:
    """``models`` = [(label, model, lookup task config)]; accuracy vs length per key kind."""
    from tasks.lookup import LookupConfig, NgramLookupTask

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
            rows.append({"L": L, **lookup_accuracy(model, task, L, n_examples, seed + L)})
            bar.update(1)
        key = cfg["key"]
        while label in curves[key]:
            label += "'"
        curves[key][label] = rows
        train = getattr(model, "checkpoint", {}).get("train", {}).get("config", {})
        info[key][label] = {"n": cfg["n"], "k": cfg["k"], "max_len": cfg["max_len"],
                            "steps": train.get("steps"),
                            "init_from": train.get("init_from") or None}
    bar.close()
    return to_jsonable({"lengths": lengths, "n_examples": n_examples, "seed": seed,
                        "curves": curves, "train": info})


def plot(result: dict):
    fig, axes = new_figure(2, width_per_panel=4.6, height=3.5)
    for ax, key, fig_no in zip(axes, KEYS, ("5", "6"), strict=True):
        for label, rows in result["curves"][key].items():
            t = result["train"][key][label]
            how = (f"copy model + {t['steps']} steps" if t.get("init_from")
                   else f"{t['steps']} steps" if t.get("steps") else "")
            ax.plot([r["L"] for r in rows], [r["acc"] for r in rows], marker="o",
                    color=COLORS.get(label.split("'")[0]),
                    label=f"{label} ({how})" if how else label)
        for v in {i["max_len"] for i in result["train"][key].values()}:
            ax.axvline(v, color=COLORS["mamba"], ls=":", lw=1)  # longest training string
        ax.set(xlabel="string length L", ylabel="lookup accuracy (k answer tokens)",
               ylim=(-0.02, 1.02), title=f"{key}-key n-gram lookup (Fig. {fig_no})")
        if result["curves"][key]:
            ax.legend(fontsize=7)
    return fig


def table(result: dict) -> list[list]:
    rows = [["key", "model"] + [f"L={L}" for L in result["lengths"]]]
    for key in KEYS:
        for label, r in result["curves"][key].items():
            by_L = {x["L"]: x["acc"] for x in r}
            rows.append([key, label] + [by_L.get(L, "-") for L in result["lengths"]])
    return rows


def _main(argv):
    p = base_parser(NAME, __doc__.splitlines()[0], training=True)
    p.add_argument("--models", default=None,
                   help=f"with --train: which of {', '.join(MODEL_SPECS)} ('a|b': first that "
                   "builds; default: preset's)")
    p.add_argument("--init", choices=INITS, default=None,
                   help="with --train: fine-tune each model's copy checkpoint, or train from "
                   "random init (default: quick copy, paper none)")
    p.add_argument("--lengths", default=None, help="test lengths (default: preset's)")
    p.add_argument("--n-examples", type=int, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 4)))
    ckpts = list(args.checkpoints)
    if not ckpts and args.train:
        labels = args.models.split(",") if args.models else None
        ckpts = train_lookup_models(args.train, args.cache_dir, args.device, labels,
                                    init=args.init)
    check(len(ckpts) >= 1, "give lookup checkpoints (or --train quick)")
    models = []
    for path in ckpts:
        m = load_model(path, archs=ARCHS, device=args.device)
        task = m.checkpoint["task"]
        check(task["name"] == "lookup",
              f"{path}: ngram_lookup needs a lookup checkpoint, got task {task['name']!r}")
        models.append((label_for(m), m, dict(task["config"])))
    pr = PRESETS[args.preset]
    result = compute(models, _ints(args.lengths) if args.lengths else pr["lengths"],
                     args.n_examples or pr["n_examples"], args.seed)
    result["checkpoints"] = ckpts
    write_outputs(NAME, result, plot(result), args.out, table(result))
    return 0


def main(argv=None) -> int:
    return run_main(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
