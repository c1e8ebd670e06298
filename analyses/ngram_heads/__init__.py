"""Which heads of a trained transformer copy by n-gram lookup? (copy paper §2.2, Fig. 3, App. C)

``python -m analyses.ngram_heads ckpt.pt`` — the suite's signature command.

1. n-gram match score, for every layer and head and n = 1..n_max: on copy examples
   ``<BOS> x <COPY> x``, at each answer-phase query the attention mass on the keys whose
   preceding n tokens equal the current n-gram (the successor of its earlier occurrence: the
   token Algorithm 1 copies next). A head's *match score* is its best score over n; the
   *target score* is the mass on the true source position.
2. Hashing heads: the earlier-layer heads whose ablation lowers the match heads' score most,
   and how much of their attention falls on the current token and the 1, 2, … before it (the
   construction's Hard-ALiBi heads average exactly their window, Lemma C.1).
3. Causal check: mean- (or zero-) ablate the match heads and measure string- and character-
   level copy accuracy (§3.1; decoded greedily here, where the paper's synthetic evaluation
   is one teacher-forced pass: the string accuracy is the same), against ablating as many
   randomly chosen other heads (distinct sets, drawn without replacement; all of them when
   few).

On an induction-heads checkpoint the examples are its task's own rows (flag, token, query:
repeated random letters would be out of its distribution); on one trained on another
language-model task over letters (lookup, phone-book), random strings of its letters repeated
twice (the answer is the second copy), the induction-head setting. ``--train LEVEL`` uses the zoo's
``copy/hard_alibi``.

SSMs (Mamba-2, Mamba) enter through their effective attention (probes.effective_attention):
y_q = Σ_k M[q, k] x_k per head (a Mamba channel is a head), scored as the pattern of each key's
share of |M| — so the same match and target scores, and the ablation replaces a head's scan
output Σ_k M x_k (its D skip stays). The search for feeding heads runs over Mamba-2 heads but
not over Mamba's channels (hundreds per layer; the conv, not a head, hashes there). A model
with neither attention nor effective attention (LSTM, STU) is refused.

Several checkpoints (``python -m analyses.ngram_heads hard_alibi.pt mamba2.pt``) are probed on
the same data and drawn side by side: copy examples when all were trained on copy; else each
on its own task's examples (``--data task``: copy examples, or the flag-recall sequences of the
induction task, whose query at the last flag should read the token after the first);
``--data repeat``: repeated random strings over the letters they all know.

HuggingFace models (a directory or hub name, booted by models.hf): a pretrained causal LM
(GPT-NeoX / Pythia, GPT-2, Llama, Mamba, Mamba-2) is probed on ``[BOS] r r`` with r random
tokens of its vocabulary (the induction setting) and r a window of natural text (``--text
FILE``; default: text the suite generates offline, which the output says is not natural text),
both by default, drawn side by side. The feeding-head search is off for them (hundreds of heads
before the match heads). A model this suite exported (models.hf.export) keeps our token ids and
its task, and is probed exactly like its .pt file. ``--per-head`` also ablates each head alone.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from analyses.claims import Claim, Figure
from analyses.common import Checkpoint, load_model, run_analysis, to_jsonable
from analyses.copy_models import label_for
from analyses.ngram_heads.checks import HF_HEAD_ARCHS, check_fits, check_model, check_n_max
from analyses.ngram_heads.claims import claim_ablation, claim_match_heads
from models.checkpoint.paths import is_hf_source
from probes.ngram_data import (
    COPY_TASKS,
    DATA,
    ProbeData,
    data_name,
    default_lengths,
    hf_batches,
    letters_of,
    probe_batches,
    repeated_batches,
)
from seqprobe.cli import add_fields
from seqprobe.config import check
from seqprobe.flags import (
    MAX_BATCH,
    MAX_DRAWS,
    MAX_HEADS,
    MAX_LENGTH,
    MAX_N,
    SEED_FIELD,
    Config,
    bound,
)
from tasks.base import make_generator
from tasks.prompts import GENERATED_TEXT_NOTE, generated_text, read_text

# probes.effective_attention and probes.match_heads (and the model code they read, which
# imports TransformerLens and so transformers) are imported by the functions that probe a
# model: the command's --help and its refusals read none of them.

NAME = "ngram_heads"
GENERATED_WORDS = 4000  # words of the offline default text (windows at many starts)
# language-model tasks over letters, on which "the token to output next appeared before"
# means something; a Markov or memorization checkpoint has no copy heads to find
NGRAM_TASKS = (*COPY_TASKS, "lookup", "phonebook", "induction")
RECIPE = "copy/hard_alibi"  # --train: Hard-ALiBi forms the match heads the paper describes
MODES = ("mean", "zero")  # ablation: replace a head's output by its mean, or by zero


@dataclass(frozen=True)
class HeadsConfig(Config):
    """The settings of one probe (the CLI's flags; see the module docstring).

    ``lengths`` None: :func:`probes.ngram_data.default_lengths` of the task. ``top_k``: ablate
    the k best heads instead of those reaching ``threshold``. ``feeding`` None: search the
    feeding heads on suite transformers and Mamba-2 (not over Mamba's channels, nor a
    pretrained LM's hundreds of heads). ``per_head``: also ablate every head alone."""

    n_max: int = field(default=8, metadata=bound(1, MAX_N, "n of an n-gram",
                                                 help="largest n of the match score"))
    lengths: tuple[int, ...] | None = field(default=None, metadata=bound(
        2, MAX_LENGTH, "tokens per string (an n-gram match needs two)",
        help="string lengths to probe (default: upper half of the (first) checkpoint's "
             "training range)"))
    batch_size: int = field(default=64, metadata=bound(
        1, MAX_BATCH, "rows per forward pass; defaults: 4 to 512", help="rows per forward pass"))
    seed: int = field(default=0, metadata=SEED_FIELD)
    mode: str = "mean"
    threshold: float = field(default=0.5, metadata=bound(
        0.0, 1.0, "a probability", help="match score of a match head"))
    # most random-ablation sets per control: every set of that size when there are no more
    # (probes.match_heads.control_sets), else this many distinct ones
    draws: int = field(default=24, metadata=bound(
        1, MAX_DRAWS, "random repetitions of a control (default 10)",
        help="most random-ablation sets per control (every set of heads when there are no "
             "more, else this many distinct ones)"))
    top_k: int | None = field(default=None, metadata=bound(
        1, MAX_HEADS, "heads", help="ablate the k best heads instead"))
    n_hashing: int = field(default=4, metadata=bound(  # feeding heads reported as hashing heads
        0, MAX_HEADS, "heads"))
    data: str = "auto"  # which probe examples: probes.ngram_data.DATA
    feeding: bool | None = None
    per_head: bool = False

    def __post_init__(self):
        check(self.mode in MODES, f"mode must be mean or zero, got {self.mode!r}")
        check(self.data in DATA, f"data must be one of {DATA}, got {self.data!r}")
        if self.lengths is not None:  # a list given is kept as the (hashable) tuple
            object.__setattr__(self, "lengths", tuple(int(L) for L in self.lengths))


def compute(model, task_name: str | None = "copy", task_config: dict | None = None,
            config: HeadsConfig | None = None, *, batches: ProbeData | None = None,
            text: str | None = None, progress: bool = True, **settings) -> dict:
    """All numbers of the analysis (see the module docstring), under ``config`` with any
    ``settings`` (its fields, by name) replaced. ``batches`` (from :func:`probe_batches`)
    replaces the probe data the task would give, so several models can be scored on the same
    examples. A pretrained LM (``task_name`` None) is probed on repeated random tokens of its
    vocabulary, or with ``data="text"`` on repeated windows of ``text``. ``per_head_drop``
    [layer, head] (with ``per_head``): the string accuracy each head costs alone, which finds
    the heads a copy needs even where no head's pattern concentrates on the copied token."""
    from probes import effective_attention as ea
    from probes.match_heads import (
        ablated_accuracy,
        ablation_controls,
        accuracy,
        control_plan,
        feeding_candidates,
        feeding_heads,
        find_match_heads,
        mean_activations,
        per_head_drops,
    )

    cfg = dataclasses.replace(config or HeadsConfig(), **settings)
    kind = check_model(model)
    task_config = dict(task_config or {})
    lengths = (list(cfg.lengths) if cfg.lengths is not None
               else default_lengths(task_name, task_config, cfg.data))
    check_fits(model, lengths, cfg.batch_size, pretrained=task_name is None, n_max=cfg.n_max)
    model.eval()
    if batches is not None:
        data = batches
    elif task_name is None:
        data = hf_batches(model, lengths, cfg.batch_size, make_generator(cfg.seed),
                          data_name(None, cfg.data), text)
    else:
        data = probe_batches(model, task_name, task_config, lengths, cfg.batch_size, cfg.seed,
                             cfg.data)
    # Mamba's heads are its channels: ablating each in turn is hundreds of runs, and its
    # conv, not a head, does the local hashing the feeding-head search looks for; a
    # pretrained LM has hundreds of heads before its match heads
    # (a suite export, an HF model with its task, is searched as its checkpoint is)
    feeding_on = ((kind != "s6" and (not ea.is_hf(model) or model.task is not None))
                  if cfg.feeding is None else cfg.feeding)
    bar = tqdm(total=3, desc=NAME, disable=not progress, leave=False)
    found = find_match_heads(model, data, cfg.n_max, cfg.threshold, cfg.top_k)
    top = list(found.heads)
    # the bar's total is the work this probe does: its control sets (fewer than 2 x draws
    # where a pool has fewer distinct sets), the feeding search's candidates, --per-head's heads
    bar.total = (3 + sum(len(sets) for sets, _ in
                         control_plan(model, top, cfg.draws, cfg.seed).values())
                 + len(feeding_candidates(model, found)) * int(feeding_on)
                 + model.cfg.n_layers * ea.n_heads(model) * int(cfg.per_head))
    bar.update(1)
    # ---- causal check: ablate the match heads vs as many random other heads
    means = mean_activations(model, data)
    base = accuracy(model, data)
    bar.update(1)
    abl = ablated_accuracy(model, data, top, cfg.mode, means)
    bar.update(1)
    # two controls: as many random heads from anywhere, and from the match heads' own layers
    controls = ablation_controls(model, data, top, base, cfg.mode, means, cfg.draws, cfg.seed,
                                 tick=lambda: bar.update(1))
    per_head_drop = (per_head_drops(model, data, base, cfg.mode, means,
                                    tick=lambda: bar.update(1)) if cfg.per_head else None)
    # ---- hashing heads: earlier-layer heads whose ablation lowers the match heads' score
    feeding = (feeding_heads(model, data, found, cfg.n_max, cfg.mode, means,
                             tick=lambda: bar.update(1)) if feeding_on else [])
    bar.close()
    hashing = [(r["layer"], r["head"]) for r in feeding[: cfg.n_hashing]]
    drop = {k: base[k] - abl[k] for k in ("string_acc", "char_acc")}
    return to_jsonable({
        "task": task_name, "lengths": lengths, "batch_size": cfg.batch_size,
        "n_max": cfg.n_max, "mode": cfg.mode, "threshold": cfg.threshold, "seed": cfg.seed,
        "n_layers": model.cfg.n_layers, "n_heads": ea.n_heads(model),
        "pe": getattr(model.cfg, "pe", None), "arch": model.arch, "heads": kind,
        "data": data_name(task_name, cfg.data),
        "feeding_searched": feeding_on, "per_head_drop": per_head_drop,
        "match_by_n": found.match_by_n, "queries_by_n": found.queries_by_n,
        "match_score": found.match_score, "best_n": found.best_n, "match_lag": found.lag,
        "target_score": found.target,
        "match_heads": [{"layer": i, "head": h, "match_score": float(found.match_score[i, h]),
                         "best_n": int(found.best_n[i, h]), "lag": int(found.lag[i, h]),
                         "target_score": float(found.target[i, h])} for i, h in top],
        "threshold_met": found.threshold_met,
        "previous_token_profile": found.profile,
        "feeding_heads": feeding,
        "hashing_heads": [{"layer": i, "head": h, "profile": found.profile[i, h]}
                          for i, h in hashing],
        "accuracy": base,
        "ablated": {"heads": top, **abl, "drop": drop},
        **controls,
    })


# ---------------------------------------------------------------------------- main
def add_arguments(p: argparse.ArgumentParser) -> None:
    add_fields(p, HeadsConfig, skip=("seed", "n_hashing"))  # --seed: every analysis'
    p.add_argument("--mode", choices=MODES, default="mean", help="ablation")
    p.add_argument("--data", choices=DATA, default="auto",
                   help="probe examples: auto (copy examples for copy models, the task's own "
                   "rows for induction models, else repeated random strings; a pretrained LM: "
                   "both repeat and text), repeat, task (each model's own task) or text (a "
                   "pretrained LM: repeated windows of --text)")
    p.add_argument("--per-head", action="store_true", help="also ablate each head alone "
                   "(the string accuracy each costs)")
    p.add_argument("--text", default=None, help="a pretrained LM's natural text (a UTF-8 "
                   "file; default: text the suite generates offline, not natural text)")


def config_of(args) -> HeadsConfig:
    """The flags as a :class:`HeadsConfig` (checked before any model is loaded)."""
    return HeadsConfig(n_max=args.n_max, lengths=args.lengths,
                       batch_size=args.batch_size, seed=args.seed, mode=args.mode,
                       threshold=args.threshold, draws=args.draws, top_k=args.top_k,
                       data=args.data, per_head=args.per_head)


def probe_text(path: str | None, seed: int) -> tuple[str, str]:
    """``(text, source)``: the file's text, or the suite's offline generated text (and a note
    that it is not natural text)."""
    if path is None:
        print(f"note: {GENERATED_TEXT_NOTE}")
        return generated_text(GENERATED_WORDS, make_generator(seed)), "generated"
    return read_text(path), path


def task_of(model) -> dict | None:
    """The task a model was trained on: a suite checkpoint's, or the one ``models.hf.export``
    stored in an exported model's config (``seqprobe``: its tokenizer keeps our token ids, so it
    is probed on the same examples as its .pt file); None for a pretrained LM."""
    from probes import effective_attention as ea

    task = model.checkpoint.get("task")
    if task is None and ea.is_hf(model):
        prov = model.checkpoint["model"].get("config", {}).get("seqprobe")
        if isinstance(prov, dict) and isinstance(prov.get("task"), dict):
            task = prov["task"]
    return task


@dataclass(frozen=True)
class Run:  # one probe of one model: its label, checkpoint path, model and kind of probe data

    label: str
    path: str
    model: object
    data: str


def _compute(args, checkpoints: list[Checkpoint]) -> dict:
    from probes import effective_attention as ea

    check(len(checkpoints) >= 1, "give checkpoint(s) (or --train --level quick)")
    config = config_of(args)
    models = []
    for c in checkpoints:  # all loaded (and refused) before any compute
        archs = HF_HEAD_ARCHS if is_hf_source(c.path) else None
        model = load_model(c.path, archs=archs, device=args.device, tasks=NGRAM_TASKS)
        check_model(model)
        task = task_of(model)
        check(task is None or task["name"] in NGRAM_TASKS, f"{c.path}: this analysis needs a model "
              f"trained on {' or '.join(NGRAM_TASKS)}, but its task is {task and task['name']!r}")
        models.append((c, model))
    runs: list[Run] = []
    for c, m in models:
        if task_of(m) is None:
            kinds = ("repeat", "text") if config.data == "auto" else (config.data,)
            check(set(kinds) <= {"repeat", "text"}, f"{c.path}: a pretrained LM has no task; "
                  "probe it with --data repeat, text or auto (both)")
            runs += [Run(f"{m.name} {k}" if len(kinds) > 1 else m.name, c.path, m, k)
                     for k in kinds]
        else:
            check(config.data != "text", f"{c.path}: --data text is for pretrained LMs (a "
                  "suite model knows only its task's tokens)")
            runs.append(Run(m.name if ea.is_hf(m) else label_for(m), c.path, m, config.data))
    text, source = (probe_text(args.text, args.seed) if any(r.data == "text" for r in runs)
                    else (None, None))
    if len(runs) == 1:
        run, = runs
        task = task_of(run.model) or {"name": None, "config": {}}
        result = compute(run.model, task["name"], task["config"],
                         dataclasses.replace(config, data=run.data), text=text)
        result["checkpoint"] = run.path
        if source:
            result["text_source"] = source
        if not result["threshold_met"]:
            print(f"note: no head reaches match score {args.threshold}; ablated the best one")
        return result
    result = compute_many(runs, config, text=text)
    if source:
        result["text_source"] = source
    return result


@dataclass(frozen=True)
class SharedData:
    """The probe data several suite models share (:func:`shared_data`): the task it comes
    from (``repeat``: random strings over ``config["D"]`` letters), its lengths and batches;
    ``batches`` None: each model gets its own task's examples."""

    task: str | None
    config: dict
    lengths: tuple[int, ...] | None
    batches: ProbeData | None


def shared_data(runs: list[Run], config: HeadsConfig) -> SharedData:
    """What every model is probed on: copy examples when all were trained on copy tasks over
    one alphabet; repeated random strings over the letters all of them know with
    ``data="repeat"``; else (``task``, or ``auto`` over different tasks) batches None: each
    model gets its own task's examples. (Repeats over the few letters an induction model knows
    put chance-level n-gram matches everywhere, and are as foreign to a copy model as to it;
    each model on its own task is the fairer side by side.)"""
    tasks = [task_of(r.model) for r in runs]
    first = tasks[0]
    data = runs[0].data
    copy = all(t["name"] in COPY_TASKS for t in tasks)
    if data == "task" or (data == "auto" and not copy):
        return SharedData(first["name"], first["config"], config.lengths, None)
    lengths = (list(config.lengths) if config.lengths is not None
               else default_lengths(first["name"], first["config"]))
    if data == "auto":
        Ds = {int(t["config"].get("D", 26)) for t in tasks}
        check(len(Ds) == 1, f"the copy checkpoints use different alphabets (D = {sorted(Ds)}); "
              "use --data repeat")
        return SharedData(first["name"], first["config"], tuple(lengths), probe_batches(
            runs[0].model, first["name"], first["config"], lengths, config.batch_size,
            config.seed))
    D = min(letters_of(t["name"], t["config"]) for t in tasks)
    return SharedData("repeat", {"D": D}, tuple(lengths), repeated_batches(
        D, lengths, config.batch_size, make_generator(config.seed)))


def compute_many(runs: list[Run], config: HeadsConfig, text: str | None = None) -> dict:
    """:func:`compute` for each run: suite models on shared probe data (:func:`shared_data`);
    with a pretrained LM among them, each model on its own (a pretrained LM's tokens are not a
    suite task's)."""
    pretrained = any(task_of(r.model) is None for r in runs)
    shared = (SharedData(None, {}, config.lengths, None) if pretrained
              else shared_data(runs, config))
    config = dataclasses.replace(config, lengths=shared.lengths)
    for run in runs:  # every run's strings checked before the first is probed
        t = task_of(run.model) or {"name": None, "config": {}}
        check_n_max(config.n_max, list(config.lengths) if config.lengths is not None
                    else default_lengths(t["name"], t["config"], run.data))
    out, seen = [], set()
    for run in tqdm(runs, desc=NAME, leave=False):
        label = run.label
        while label in seen:  # two checkpoints of one kind
            label += "'"
        seen.add(label)
        t = task_of(run.model) or {"name": None, "config": {}}
        if t["name"] is None:
            r = compute(run.model, None, {}, config, data=run.data, text=text, progress=False)
        elif shared.batches is None:
            r = compute(run.model, t["name"], t["config"], config, data="task", progress=False)
        else:
            repeat = shared.task == "repeat"
            r = compute(run.model, t["name"] if repeat else shared.task, shared.config, config,
                        data="repeat" if repeat else run.data, batches=shared.batches,
                        progress=False)
        out.append({"label": label, "checkpoint": run.path, "task": t["name"], **r})
    names = {r["data"] for r in out}
    return {"models": out, "data": names.pop() if len(names) == 1 else "task",
            "mode": out[0]["mode"],
            "lengths": None if shared.lengths is None else list(shared.lengths),
            "seed": config.seed}


def plot(result: dict):
    """The figure (:func:`analyses.ngram_heads.plots.plot`; matplotlib imported here)."""
    from analyses.ngram_heads import plots

    return plots.plot(result)


def table(result: dict) -> list:
    from analyses.ngram_heads import plots

    return plots.table(result)


FIGURE = Figure(
    "n-gram match heads in a copy transformer", "Copy paper §2.2, Fig. 3, App. C",
    (Claim("copy transformers retrieve by n-gram matching: heads attend to the successor of "
           "the earlier occurrence of the current n-gram (or one past it, reading the successor "
           "from the key's previous-token slot)", claim_match_heads),
     Claim("ablating those heads destroys copying; as many random heads (of the same layers) "
           "do not",
           claim_ablation)),
    recipes=lambda level: [RECIPE])


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=add_arguments, threads=4)
