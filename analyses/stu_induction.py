"""Train short, test long: induction-heads recall vs sequence length (spectral paper Fig. 5).

``python -m analyses.stu_induction --train quick`` trains (cached) a two-layer STU with
filters of length T = 256 — and, beside it, a Hard-ALiBi transformer and a Mamba-2 of
similar size — on the induction-heads task at lengths T^q, several seeds each, then measures
greedy recall accuracy at lengths up to T. ``python -m analyses.stu_induction CKPT...``
evaluates given induction checkpoints instead.

Outputs: accuracy vs evaluation length per architecture and training length (mean over seeds,
min–max band), chance 1/D, a table, and for each (arch, training length) the pooled accuracy
at the longest length with a one-sided binomial p-value against chance.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import defaultdict

import numpy as np
import torch
from tqdm.auto import tqdm

from analyses.common import base_parser, load_model, run_main, to_jsonable, write_outputs
from figures.style import COLORS, new_figure
from models.generation import evaluate_prompts
from tasks.base import TaskError, check, make_generator
from tasks.registry import make_task

NAME = "stu_induction"
ARCHS = ("stu", "transformer", "mamba2", "mamba", "lstm")  # any language model can be probed
DEFAULT_ARCHS = ("stu", "transformer", "mamba2")
T_FILTER = 256  # paper §4.2: filters of length T = 256
PRESET_RUNS = {"quick": {"qs": (1 / 2, 3 / 4), "seeds": 3},
               "paper": {"qs": (1 / 2, 5 / 8, 3 / 4, 7 / 8), "seeds": 5}}


# ---------------------------------------------------------------------------- evaluation
def binomial_sf(k: int, n: int, p: float) -> float:
    """P[X >= k] for X ~ Binomial(n, p) (exact, in log space)."""
    if k <= 0:
        return 1.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(p) + (n - i) * math.log1p(-p) for i in range(k, n + 1)]
    m = max(logs)
    return float(min(1.0, math.exp(m) * sum(math.exp(v - m) for v in logs)))


@torch.no_grad()
def recall_accuracy(model, task, lengths: list[int], n_eval: int, seed: int,
                    batch_size: int = 256) -> list[int]:
    """Number of correctly recalled tokens (greedy, out of ``n_eval``) at each length; the
    same evaluation sequences for every model (seeded by ``seed`` and the length)."""
    out = []
    for L in lengths:
        g = make_generator(seed * 1_000_003 + L)
        right = 0
        for start in range(0, n_eval, batch_size):
            b = task.eval_batch(min(batch_size, n_eval - start), g, length=L)
            acc = evaluate_prompts(model, b.to(model.device), greedy=True)["string_acc"]
            right += round(acc * b.prompts.shape[0])
        out.append(right)
    return out


def describe(model) -> str:
    """Architecture label: the arch, with the positional encoding for transformers."""
    pe = getattr(model.cfg, "pe", None)
    return f"{model.arch} ({pe})" if pe else model.arch


def compute(models: list, lengths: list[int] | None = None, n_eval: int = 512, seed: int = 0,
            progress: bool = True) -> dict:
    """Recall accuracy of induction-heads checkpoints at each evaluation length.

    ``models``: loaded suite models (``models.load``) trained on the ``induction`` task; they
    are grouped by (architecture, training length) and averaged over the group (seeds).
    """
    check(len(models) >= 1, "stu_induction needs at least one model")
    check(n_eval >= 1, f"n_eval must be >= 1, got {n_eval}")
    groups: dict[tuple[str, int], list] = defaultdict(list)
    D = None
    for m in models:
        task_info = m.checkpoint["task"]
        check(task_info["name"] == "induction",
              f"stu_induction needs induction-task checkpoints, got one trained on "
              f"{task_info['name']!r}")
        task = make_task("induction", task_info["config"])
        check(D is None or task.cfg.D == D, "all checkpoints must share the alphabet size D")
        D = task.cfg.D
        groups[(describe(m), task.cfg.length)].append(m)
    if lengths is None:
        top = max(T_FILTER, max(L for _, L in groups))
        lengths = sorted({2**i for i in range(4, int(math.log2(top)) + 1)} | {L for _, L in groups})
    check(all(L >= 3 for L in lengths), f"evaluation lengths must be >= 3, got {lengths}")
    task = make_task("induction", {"D": D, "length": 3})
    chance = 1.0 / D
    rows = []
    bar = tqdm(total=len(models), desc=NAME, disable=not progress, leave=False)
    for (arch, train_len), ms in sorted(groups.items()):
        per_seed = []
        for m in ms:
            m.eval()
            per_seed.append(recall_accuracy(m, task, lengths, n_eval, seed))
            bar.update(1)
        counts = np.array(per_seed)  # [seed, length]
        acc = counts / n_eval
        pooled_right, pooled_n = int(counts[:, -1].sum()), n_eval * len(ms)
        rows.append({
            "arch": arch, "train_length": train_len, "n_models": len(ms),
            "n_params": ms[0].n_params(),
            "train_steps": [m.checkpoint["train"].get("step") for m in ms],
            "acc_mean": acc.mean(0).tolist(), "acc_min": acc.min(0).tolist(),
            "acc_max": acc.max(0).tolist(), "acc_per_model": acc.tolist(),
            "longest": {"length": lengths[-1], "acc": pooled_right / pooled_n,
                        "n": pooled_n,
                        "p_value_vs_chance": binomial_sf(pooled_right, pooled_n, chance)},
        })
    bar.close()
    return to_jsonable({"lengths": lengths, "n_eval": n_eval, "seed": seed, "D": D,
                        "chance": chance, "rows": rows})


# ---------------------------------------------------------------------------- plot
def _color(arch: str) -> str:
    for key in ("hard_alibi", "alibi", "rope", "nope", "mamba2", "stu", "mamba", "lstm"):
        if key in arch:
            return COLORS.get(key, "#333333")
    return "#333333"


def plot(result: dict):
    archs = sorted({r["arch"] for r in result["rows"]},
                   key=lambda a: (not a.startswith("stu"), a))
    fig, axes = new_figure(len(archs), width_per_panel=3.6, height=3.2)
    x = result["lengths"]
    for ax, arch in zip(axes, archs, strict=True):
        rows = [r for r in result["rows"] if r["arch"] == arch]
        styles = ["-", "--", ":", "-."]
        for i, r in enumerate(sorted(rows, key=lambda r: r["train_length"])):
            ls = styles[i % len(styles)]
            ax.plot(x, r["acc_mean"], ls, marker="o", ms=3, color=_color(arch),
                    label=f"trained at L = {r['train_length']} ({r['n_models']} seeds)")
            ax.fill_between(x, r["acc_min"], r["acc_max"], color=_color(arch), alpha=0.12)
            ax.axvline(r["train_length"], color=_color(arch), ls=ls, lw=0.6, alpha=0.6)
        ax.axhline(result["chance"], color="k", ls=":", lw=1, label="chance")
        ax.set(xscale="log", xlabel="evaluation length", ylabel="recall accuracy",
               ylim=(0, 1.05), title=arch)
        ax.set_xticks(x)
        ax.set_xticklabels([str(v) for v in x], fontsize=7)
        ax.minorticks_off()
        ax.legend(loc="lower left", fontsize=6)
    return fig


def table(result: dict) -> list[list]:
    head = ["arch", "train L", "params"] + [f"L={v}" for v in result["lengths"]] + ["p(longest)"]
    rows = [head]
    for r in result["rows"]:
        rows.append([r["arch"], r["train_length"], r["n_params"]]
                    + [f"{m:.3f}" for m in r["acc_mean"]]
                    + [f"{r['longest']['p_value_vs_chance']:.2g}"])
    return rows


# ---------------------------------------------------------------------------- training
def train_runs(preset: str, cache_dir: str, archs: tuple[str, ...], qs: tuple[float, ...],
               seeds: int, device: str, T: int = T_FILTER) -> tuple[list[str], list[dict]]:
    """Train (or reuse) every (arch, q, seed) checkpoint; an arch that fails to build (e.g.
    not importable yet) is skipped with a printed note and retried once at the end."""
    from models.registry import build_model
    from models.train import make_spec, train_cached

    lengths = sorted({max(3, round(T**q)) for q in qs})
    paths, skipped = [], []

    def runs(arch):
        return [(L, s) for L in lengths for s in range(seeds)]

    def try_arch(arch, last_try: bool) -> bool:
        try:
            spec = make_spec(arch, "induction", preset, task_config={"length": lengths[0]})
            build_model(arch, spec.model)
        except Exception as e:  # noqa: BLE001 - any failure to build: skip the arch, say why
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            print(f"note: skipping arch {arch!r} ({'again, ' if last_try else ''}it fails to "
                  f"build: {why}){'' if last_try else '; will retry at the end'}",
                  file=sys.stderr)
            if last_try:
                skipped.append({"arch": arch, "reason": why})
            return False
        for L, s in tqdm(runs(arch), desc=f"train {arch}", leave=False):
            paths.append(str(train_cached(arch, "induction", preset, cache_dir,
                                          task_config={"length": L},
                                          train_overrides={"seed": s}, device=device,
                                          progress=False)))
        return True

    deferred = [a for a in archs if not try_arch(a, last_try=False)]
    for arch in deferred:
        try_arch(arch, last_try=True)
    return paths, skipped


# ---------------------------------------------------------------------------- main
def _numbers(text: str, kind=float) -> tuple:
    try:
        out = []
        for v in text.split(","):
            v = v.strip()
            if "/" in v:
                a, b = v.split("/")
                out.append(kind(float(a) / float(b)))
            elif v:
                out.append(kind(v))
        return tuple(out)
    except ValueError:
        raise TaskError(f"cannot read {text!r} as comma-separated numbers") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--archs", default=",".join(DEFAULT_ARCHS),
                   help="architectures trained by --train (default: stu,transformer,mamba2)")
    p.add_argument("--qs", default=None, help="training lengths T^q with T = 256 "
                   "(default quick: 1/2,3/4; paper: 1/2,5/8,3/4,7/8)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per (arch, q) (quick 3)")
    p.add_argument("--lengths", default=None, help="evaluation lengths (default 16..256)")
    p.add_argument("--n-eval", type=int, default=512, help="sequences per evaluation length")


def _main(argv):
    p = base_parser(NAME, __doc__.splitlines()[0], training=True)
    add_arguments(p)
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # shared CPUs; the models are tiny
    t0 = time.time()
    skipped: list[dict] = []
    paths = list(args.checkpoints)
    if not paths:
        check(args.train is not None, "give induction checkpoints, or --train quick|paper to "
              "train them")
        runs = PRESET_RUNS[args.train]
        qs = _numbers(args.qs) if args.qs else runs["qs"]
        seeds = args.seeds if args.seeds is not None else runs["seeds"]
        check(seeds >= 1 and all(0 < q <= 1 for q in qs), "need seeds >= 1 and q in (0, 1]")
        archs = tuple(a.strip() for a in args.archs.split(",") if a.strip())
        paths, skipped = train_runs(args.train, args.cache_dir, archs, qs, seeds, args.device)
        check(len(paths) > 0, "no architecture could be trained")
    models = [load_model(path, archs=ARCHS, device=args.device) for path in paths]
    lengths = list(_numbers(args.lengths, int)) if args.lengths else None
    result = compute(models, lengths=lengths, n_eval=args.n_eval, seed=args.seed)
    result.update({"checkpoints": paths, "skipped": skipped, "time_s": round(time.time() - t0, 1),
                   "preset": args.train})
    write_outputs(NAME, result, plot(result), args.out, table(result))
    for s in skipped:
        print(f"note: {s['arch']} was skipped: {s['reason']}")
    print(f"done in {result['time_s']} s")
    return 0


def main(argv=None) -> int:
    return run_main(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
