"""What every analysis shares: its description for the reproduce plan (:class:`Figure`, with
the paper's :class:`Claim` readers), the one ``main`` skeleton (:func:`run_analysis`), loading
checkpoints, and writing outputs.

An analysis module has ``compute(...) -> dict`` (JSON-serialisable numbers), ``plot(result) ->
Figure``, ``table(result) -> rows``, a ``FIGURE`` (title, paper, claims, the zoo recipes it
trains) and ``main(argv)``, which is :func:`run_analysis`: parse the flags, check the output
directory, get the checkpoints (given, or the recipes from :mod:`analyses.zoo` with ``--train``),
compute, write ``DIR/NAME.png`` and ``DIR/NAME.json`` and print the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from analyses import zoo
from analyses.zoo import dryrun, recipes
from analyses.zoo.dryrun import Builder
from analyses.zoo.recipe import is_zoo_ref, parse_zoo_ref
from figures.style import DEFAULT_OUT, figure_png
from models.checkpoint import is_hf_source
from models.hf.export_map import ExportError, read_provenance
from models.loading import load
from models.memory import check_evaluation_fits
from models.registry import HF_ARCHS
from models.train import distributed
from models.train.cache import check_cache_dir
from seqprobe import flags
from seqprobe.atomic import output_lock, write_atomic
from seqprobe.cli import OneLineParser, add_device_argument, add_preset_arguments, run_cli
from seqprobe.config import check, config_to_dict
from seqprobe.device import resolve_device
from seqprobe.errors import InputError
from seqprobe.sweep import EXIT_SOME_FAILED, Failed, add_backend_arguments, backend_of
from tasks.copy import CopyTask, TokenCopyPrompts

S = TypeVar("S")

# The three reasons a claim reader may leave a claim undecided (Undecided's constructors).
OUTSIDE_REGIME = "outside the paper's regime"
NOT_LEARNT = "no model learnt the task"
EITHER_SHAPE = "the interval fits either shape"
NOT_DECIDED = "not decided at this level"


@dataclass(frozen=True)
class Undecided:
    """The verdict "not decided at this level", with its reason: the run cannot say whether
    the paper's claim holds, because it was measured outside the paper's regime (a length,
    scale or step budget where the paper's own numbers predict no clear effect), because no
    model learnt the task (so how it behaves cannot be read), or because the interval fits
    either answer. Distinct from "does not hold" (``False``: the run contradicts the claim in
    a setting where it should show) and from n/a (``None``: the claim does not apply or is
    vacuous). Make one with :meth:`regime`, :meth:`not_learnt` or :meth:`either_shape`."""

    reason: str

    def __post_init__(self):
        check(isinstance(self.reason, str) and bool(self.reason.strip()),
              "an undecided verdict needs its reason")

    @classmethod
    def regime(cls, why: str) -> Undecided:
        return cls(f"{OUTSIDE_REGIME}: {why}")

    @classmethod
    def not_learnt(cls, why: str) -> Undecided:
        return cls(f"{NOT_LEARNT}: {why}")

    @classmethod
    def either_shape(cls, why: str) -> Undecided:
        return cls(f"{EITHER_SHAPE}: {why}")

    def __str__(self) -> str:
        return f"{NOT_DECIDED} — {self.reason}"


# holds, does not hold, n/a (None), or not decided at this level
Verdict = bool | None | Undecided
Measure = Callable[[dict], "tuple[str, Verdict] | None"]

RELATIONS = {"<": float.__lt__, "<=": float.__le__, ">": float.__gt__, ">=": float.__ge__}


@dataclass(frozen=True)
class Margin:
    """How far a claim's measured value sits from what decides it, in the claim's own units:
    ``quantity`` measured ``value``, against ``threshold`` (a cut-off, or the other side of a
    comparison) by ``relation``: the claim's condition is ``value RELATION threshold``.
    :attr:`distance` is signed: > 0 on the side where the condition holds. ``interval``: a
    confidence interval of ``value`` where the reader has one (seeds, a bootstrap)."""

    quantity: str
    value: float
    relation: str
    threshold: float
    unit: str = ""
    interval: tuple[float, float] | None = None

    def __post_init__(self):
        check(self.relation in RELATIONS, f"margin relation must be one of {list(RELATIONS)}, "
              f"got {self.relation!r}")
        object.__setattr__(self, "value", float(self.value))
        object.__setattr__(self, "threshold", float(self.threshold))
        if self.interval is not None:
            object.__setattr__(self, "interval", tuple(float(x) for x in self.interval))

    @property
    def distance(self) -> float:
        """``value − threshold`` for > / >=, ``threshold − value`` for < / <=."""
        d = self.value - self.threshold
        return (d if self.relation.startswith(">") else -d) + 0.0  # + 0.0: never "-0"

    @property
    def holds(self) -> bool:
        """Whether ``value RELATION threshold``."""
        return bool(RELATIONS[self.relation](self.value, self.threshold))

    def to_dict(self) -> dict:
        return {"quantity": self.quantity, "value": self.value, "relation": self.relation,
                "threshold": self.threshold, "unit": self.unit, "distance": self.distance,
                "interval": list(self.interval) if self.interval else None}

    def __str__(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        ci = (f" (95 % CI {self.interval[0]:.3g}–{self.interval[1]:.3g})" if self.interval
              else "")
        return (f"{self.quantity} {self.value:.3g}{ci} vs {self.relation} "
                f"{self.threshold:.3g}{unit}: {self.distance:+.3g}{unit}")


def tightest(*margins: Margin) -> Margin:
    """Of the conditions a claim needs all of, the one closest to failing (smallest distance
    relative to its threshold's size): the claim's margin."""
    return min(margins, key=lambda m: m.distance / max(abs(m.threshold), 1e-12))


class Reading(tuple):
    """What a claim reader returns: the pair ``(measured text, verdict)`` — it unpacks and
    compares as that pair — with the claim's :class:`Margin` as ``.margin`` (None where the
    verdict is not a comparison with a number: n/a, no run to read)."""

    margin: Margin | None

    def __new__(cls, measured: str, verdict: Verdict, margin: Margin | None = None):
        self = super().__new__(cls, (measured, verdict))
        self.margin = margin
        return self


def verdict_text(verdict: Verdict) -> str:
    """How the index writes a verdict: holds / does not hold / n/a / not decided at this
    level — REASON."""
    if isinstance(verdict, Undecided):
        return str(verdict)
    return {True: "holds", False: "does not hold", None: "n/a"}[
        None if verdict is None else bool(verdict)]


def with_not_matched(text: str, not_matched: str | None) -> str:
    """A claim's measured text with what differs from the paper's setting first ("not
    matched: …"), so a reader sees the setting before the number."""
    return f"not matched: {not_matched}. {text}" if not_matched else text


@dataclass(frozen=True)
class Claim:
    """A paper's claim and how to read whether it holds from the analysis' JSON:
    ``measure(json) -> (what we measured, verdict)``: ``True`` holds, ``False`` does not hold
    (in a setting where the paper's claim should show), ``None`` not applicable (or vacuous),
    or :class:`Undecided` (not decided at this level, with its reason). The pair is a
    :class:`Reading` carrying the claim's :class:`Margin` (how far the measured value sits
    from what decides it), which the index shows. A reader returns ``None`` instead of the
    pair for a claim measured at another level only (a medium claim read from a quick run):
    the index leaves it out."""

    paper: str
    measure: Measure


@dataclass(frozen=True)
class Figure:
    """What the reproduce plan needs to know about an analysis."""

    title: str
    paper: str  # which paper / figure
    claims: tuple[Claim, ...] = ()
    # the presets it has (``python -m analyses.reproduce --medium`` runs those with medium)
    presets: tuple[str, ...] = ("quick", "paper")
    # preset -> the zoo recipes ``--train PRESET`` uses (reproduce trains them first)
    recipes: Callable[[str], Sequence[str]] = lambda preset: ()
    # preset -> extra flags reproduce passes (beyond --PRESET, --out, and --train/--cache-dir
    # when it has recipes)
    extra_args: Callable[[str], Sequence[str]] = lambda preset: ()
    outputs: tuple[str, ...] = ()  # output stems (default: the analysis name)
    # cores its own compute keeps busy: one (one thread) unless it runs processes side by side;
    # a second thread speeds the suite's small models up far less than 2x, and waits on the
    # slower core when other work shares the machine
    slots: int = 1
    trains: bool = True  # takes --train / --cache-dir
    # preset -> (label, spec builder) of the models it trains itself, outside the zoo (the
    # memorization grid's cells): what ``--dry-run`` runs beside the recipes
    dry_run_specs: Callable[[str], Sequence[tuple[str, Builder]]] = lambda preset: ()


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint an analysis was given: ``label`` is the zoo recipe's name or the file's."""

    label: str
    path: str


def base_parser(name: str, description: str, checkpoints: bool = True,
                training: bool = False) -> argparse.ArgumentParser:
    """The flags every analysis takes: ``--out``, ``--device``, ``--seed`` (+ presets)."""
    p = OneLineParser(prog=f"python -m analyses.{name}", description=description)
    if checkpoints:
        p.add_argument("checkpoints", nargs="*",
                       help="suite checkpoint file(s) (.pt) or zoo name(s) (zoo:copy/rope, "
                       "zoo:NAME@LEVEL: the cached checkpoint, never trained), a suite export "
                       "(python -m models.hf.export) as the checkpoint it came from, or "
                       "HuggingFace causal LM(s) where the analysis takes them: a model "
                       "directory or a hub name")
    p.add_argument("--out", default=str(DEFAULT_OUT),
                   help="output directory (default: figures/out)")
    add_device_argument(p)
    p.add_argument("--seed", type=flags.flag("--seed"), default=0,
                   help="seed of the evaluation data")
    if training:
        add_preset_arguments(p)
        p.add_argument("--dry-run", action="store_true",
                       help="compute nothing: build each model --train PRESET (else the "
                       "preset) would train at its real size, run two optimizer steps, print "
                       "sizes, step times and projected H100 hours (analyses.zoo.dryrun); "
                       "writes OUT/NAME_dry_run.json, exit 1 if any cannot run")
        add_backend_arguments(p)  # --ray: the models to train (or cells) as Ray tasks
    return p


def check_output_dir(out: str | Path) -> Path:
    """Fail before any compute if ``out`` cannot take the outputs."""
    out = Path(out)
    for p in (out, *out.parents):
        if p.exists():
            check(p.is_dir(), f"--out {out}: {p} is a file, not a directory")
            check(os.access(p, os.W_OK | os.X_OK), f"--out {out}: {p} is not writable")
            break
    return out


def run_analysis(name: str, doc: str, argv: list[str] | None, *,
                 compute: Callable[[argparse.Namespace, list[Checkpoint]], dict],
                 plot: Callable[[dict], Any], table: Callable[[dict], list] | None = None,
                 figure: Figure | None = None,
                 add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
                 recipes: Callable[[argparse.Namespace], Sequence[str]] | None = None,
                 output_name: Callable[[argparse.Namespace, dict], str] | None = None,
                 threads: int | None = None, checkpoints: bool = True,
                 dry_run_specs: Callable[[argparse.Namespace], Sequence[tuple[str, Builder]]]
                 | None = None, failed_key: str | None = None) -> int:
    """The ``main`` of an analysis. ``compute(args, checkpoints)`` gets the checkpoints given
    on the command line and, with ``--train PRESET``, those of ``recipes(args)`` (default:
    ``figure.recipes(PRESET)``) from the zoo, trained first where not cached.

    With ``--dry-run`` nothing is computed: those recipes and the models of
    ``dry_run_specs(args)`` (default: ``figure.dry_run_specs(PRESET)``) take two steps each
    (:func:`analyses.zoo.dryrun.report`); the exit code is the dry run's.

    ``failed_key``: the result's list of parts (cells, recipes) that failed on every attempt
    of a sweep; when it is not empty the outputs are still written, and the exit code is
    :data:`~seqprobe.sweep.EXIT_SOME_FAILED`."""
    training = figure is not None and figure.trains

    def body(argv):
        p = base_parser(name, doc.strip().splitlines()[0], checkpoints=checkpoints,
                        training=training)
        if add_arguments is not None:
            add_arguments(p)
        args = p.parse_args(argv)
        check(not distributed.launched(), f"analyses.{name} runs in one process, not under "
              "torchrun: train its recipes with `torchrun -m analyses.zoo train NAME...`, then "
              "run the analysis (it reads them from the cache)")
        if training:
            for level in dict.fromkeys(x for x in (args.preset, args.train) if x):
                check(level in figure.presets, f"analyses.{name} has no {level} level (it has "
                      f"{', '.join(figure.presets)})")
        check_output_dir(args.out)
        resolve_device(args.device)
        if threads is not None:  # tiny models: more threads only contend on shared cores
            torch.set_num_threads(max(1, min(torch.get_num_threads(), threads)))
        if training and args.dry_run:
            args.train = args.train or args.preset  # what the recipe functions read
            names = list(recipes(args) if recipes else figure.recipes(args.train))
            own = (dry_run_specs(args) if dry_run_specs
                   else figure.dry_run_specs(args.train))
            return dryrun.report([*dryrun.recipe_builders(names, args.train), *own],
                                 args.device, args.out, f"{name}_dry_run")
        given = [given_checkpoint(c, getattr(args, "cache_dir", "checkpoints"))
                 for c in getattr(args, "checkpoints", [])]
        if training and args.train:
            names = list(recipes(args) if recipes else figure.recipes(args.train))
            for n in names:  # every name checked before any training
                zoo.recipe(n).parts(args.train)
            check_cache_dir(args.cache_dir, write=False)  # a read-only cache serves what it has
            if args.ray is not None and names:  # not cached yet: Ray tasks, retried
                backend = backend_of(args, os.cpu_count() or 1, args.device, num_cpus=max(
                    zoo.recipe(n).slots for n in names))
                done = zoo.train_recipes(names, args.train, args.cache_dir, args.device,
                                         backend, progress=False)
                failed = [f"{n} ({f.error}; {f.attempts} attempts)" for n, f in done.items()
                          if isinstance(f, Failed)]
                check(not failed, f"training failed: {', '.join(failed)}")
                given += [Checkpoint(n, str(done[n])) for n in names]
            else:
                given += [Checkpoint(n, str(zoo.checkpoint(n, args.train, args.cache_dir,
                                                           args.device, progress=False)))
                          for n in names]
        with output_lock(args.out, name):  # one writer of these outputs at a time
            result = compute(args, given)
            out_name = output_name(args, result) if output_name else name
            write_outputs(out_name, result, plot(result), args.out,
                          table(result) if table else None)
        return EXIT_SOME_FAILED if failed_key and result.get(failed_key) else 0

    return run_cli(body, argv)


def given_checkpoint(path: str, cache_dir: str | Path = "checkpoints") -> Checkpoint:
    """A checkpoint named on the command line: a file or model directory as it is, or a zoo
    name (``zoo:NAME[@LEVEL]``) as its cached file in ``cache_dir`` (the analysis'
    ``--cache-dir``), labelled with the recipe's name as ``--train`` labels it. A zoo name not
    trained yet is one line saying how to train it, before any work (nothing is trained)."""
    if is_zoo_ref(path):
        name, _ = parse_zoo_ref(path)
        return Checkpoint(name, str(zoo.resolve(path, cache_dir)))
    return Checkpoint(Path(path).stem, str(path))


def export_of_dir(path: str | os.PathLike) -> dict | None:
    """The provenance a suite export (``python -m models.hf.export``) stored in ``path``'s
    config.json (``seqprobe``: arch, model config, task, step), or None for anything else (a
    checkpoint file, a hub name, another HF model, an unreadable config: the loader says
    what is wrong with it)."""
    if not (Path(path).is_dir() and (Path(path) / "config.json").is_file()):
        return None
    try:
        prov = read_provenance(path)
    except ExportError:
        return None
    return prov if prov is not None and isinstance(prov.get("task"), dict) else None


def export_of(model) -> dict | None:
    """A loaded model's export provenance (see :func:`export_of_dir`): a HuggingFace model
    booted from a suite export, which analyses treat as the checkpoint it came from (its task,
    token ids and logits are the checkpoint's); None for a suite model or a pretrained LM."""
    if model.arch not in HF_ARCHS or model.task is None:
        return None
    prov = ((model.provenance.pretrained or {}).get("config") or {}).get("seqprobe")
    return prov if isinstance(prov, dict) else None


def suite_arch(model) -> str:
    """The suite architecture a model is: its own, or for a suite export the checkpoint's."""
    export = export_of(model)
    return export["arch"] if export is not None else model.arch


def is_pretrained(model) -> bool:
    """A HuggingFace LM the suite did not train: no task of ours, its own tokenizer's text."""
    return model.arch in HF_ARCHS and export_of(model) is None


def load_model(path: str, archs: Iterable[str] | None = None, device: str | torch.device = "cpu",
               tasks: Iterable[str] | None = None):
    """``models.load`` (a suite checkpoint or a HuggingFace model) plus checks that the model
    suits this analysis: its arch is in ``archs`` and its task (a suite checkpoint's, or a
    suite export's) in ``tasks``.

    A HuggingFace model (arch in ``models.registry.HF_ARCHS``) is taken only by an analysis
    whose ``archs`` names its arch: it has no training task, so an analysis that reads one (or
    a suite config) must say it can do without. A suite export (:func:`export_of_dir`) is taken
    as the checkpoint it came from by an analysis that reads only a model's outputs: one whose
    ``archs`` names HF archs, or takes any model (``archs`` None); an analysis that reads the
    suite model itself (its config, hooks or training record) refuses it in one line naming
    the checkpoint to give instead."""
    if is_hf_source(path):
        export = export_of_dir(path)
        takes = sorted(set(archs or ()) & set(HF_ARCHS))
        if export is not None:
            check(archs is None or bool(takes), f"{path}: is a suite export (a "
                  f"{export.get('arch')} model trained on {export['task'].get('name')}, "
                  "written by python -m models.hf.export); this analysis reads the suite "
                  "model itself (its config, hooks or training record), which an export does "
                  "not keep: give the checkpoint it was exported from (.pt, or its zoo: name)")
            archs = None if archs is None else [*archs, *HF_ARCHS]
        else:
            check(bool(takes), f"{path}: this analysis needs a suite checkpoint (.pt) "
                  f"{'of a ' + ' or '.join(sorted(set(archs))) + ' model ' if archs else ''}"
                  "trained on its task, not a HuggingFace model")
    model = load(path, device=resolve_device(device), archs=archs)
    check_evaluation_fits(model, str(path))  # in-range task lengths can still ask for GBs
    # a suite model's task, or an export's (its provenance); a pretrained LM has none
    if tasks is not None and not is_pretrained(model) and model.task is not None:
        task = model.task.name
        check(task in set(tasks), f"{path}: this analysis needs a checkpoint trained on "
              f"{' or '.join(sorted(set(tasks)))}, but the file's task is {task!r}")
    return model


def need(checkpoints: Sequence[Checkpoint], what: str = "checkpoint(s)") -> None:
    check(len(checkpoints) >= 1, f"give {what} (or --train quick)")


# ---------------------------------------------------------------------------- copy-paper models
COPY_TASKS = ("copy", "dup_ngram_copy")
COPY_ARCHS = ("transformer", "mamba", "mamba2", "lstm", "stu")  # what the copy analyses open
# ... and those that also run on pretrained LMs (copy prompts built from the tokenizer)
COPY_OR_HF_ARCHS = (*COPY_ARCHS, *HF_ARCHS)
PRETRAINED_SEP = "\n\n"  # between the copies of a pretrained prompt (tasks.prompts' copy format)
# The copy models of Fig. 1 (length_generalization, copy_efficiency), as zoo labels
# (``copy/{label}``); the quick GSSMs learn far too slowly at CPU budgets to add Mamba there.
COPY_LABELS = {"quick": ("hard_alibi", "nope", "rope", "lstm"),
               "paper": ("hard_alibi", "nope", "alibi", "rope", "mamba", "lstm")}


def copy_recipes(preset: str, labels: Sequence[str] | None = None) -> list[str]:
    """The zoo's copy recipes of ``labels`` (default: :data:`COPY_LABELS` of the preset)."""
    labels = labels or COPY_LABELS[preset]
    for label in labels:
        check(label in recipes.COPY_MODELS,
              f"unknown model {label!r}; allowed: {', '.join(recipes.COPY_MODELS)}")
    return [f"copy/{label}" for label in labels]


def add_copy_models_argument(p: argparse.ArgumentParser) -> None:
    """``--models a,b``: with ``--train``, which of the zoo's copy models (see
    :func:`copy_models_recipes`)."""
    p.add_argument("--models", default=None,
                   help=f"with --train: which of {', '.join(recipes.COPY_MODELS)} (default: preset's)")


def add_test_size_arguments(p: argparse.ArgumentParser, unit: str) -> None:
    """``--lengths`` and ``--n-examples`` (``unit`` per length), both the preset's by default."""
    p.add_argument("--lengths", type=flags.flag("--lengths"),
                   default=None, help="test lengths (default: preset's)")
    p.add_argument("--n-examples", type=flags.flag("--n-examples"), default=None,
                   help=f"{unit} per length (default: preset's)")


def with_flags(settings: S, args: argparse.Namespace, *names: str, **flag_of: str) -> S:
    """A preset's settings (an analysis' frozen ``Settings``) with the value of each flag the
    command line gave in place of the preset's. ``names``: fields set by the flag of the same
    name (``--n-examples`` -> ``n_examples``); ``flag_of``: field -> the flag that sets it
    where the names differ (``n_values="n"``). A flag left out (None) keeps the preset's."""
    given = {field: getattr(args, flag) for field, flag in
             (*((n, n) for n in names), *flag_of.items())}
    return dataclasses.replace(settings, **{k: v for k, v in given.items() if v is not None})


def copy_models_recipes(args: argparse.Namespace) -> list[str]:
    """The copy recipes of ``--train PRESET [--models ...]``."""
    return copy_recipes(args.train, args.models.split(",") if args.models else None)


def label_for(model) -> str:
    """``hard_alibi`` / ``nope`` / … for transformers, the arch name otherwise (the zoo's copy
    labels, which are also colour keys of figures.style); hand-set constructions
    (models/constructions.py) are labelled as such, HuggingFace models by their name, and a
    suite export as the checkpoint it came from."""
    export = export_of(model)
    if export is not None:
        cfg = export.get("config") or {}
        return cfg.get("pe", "nope") if export.get("arch") == "transformer" else export["arch"]
    if model.arch in HF_ARCHS:
        return model.name
    train = model.provenance.train
    if train.get("construction"):
        return f"construction {train['construction']} n={train.get('n')}"
    return model.cfg.pe if model.arch == "transformer" else model.arch


def load_copy_models(paths: Sequence[str], device, archs: Iterable[str] = COPY_ARCHS,
                     tasks: Iterable[str] = COPY_TASKS) -> tuple[dict, dict, int]:
    """Load copy-style checkpoints that share one alphabet: ``({label: model}, {label: train
    info}, D)``; a repeated label gets a ``'``. Pretrained LMs (where ``archs`` admits
    HF_ARCHS) bring their own tokens (:func:`copy_prompts`) and leave D alone. A suite export
    is its checkpoint's model: its task's alphabet, its step (an export keeps no training
    config: steps, context and samples seen are None)."""
    models, info, D = {}, {}, None
    for path in paths:
        m = load_model(path, archs=archs, device=device, tasks=tasks)
        label = label_for(m)
        while label in models:
            label += "'"
        if is_pretrained(m):  # a pretrained LM: no alphabet of ours (see copy_prompts)
            models[label] = m
            info[label] = {"path": path, "pretrained": m.provenance.source,
                           "max_len": None, "context": None, "steps": None,
                           "greedy_eval": True, "samples_seen": None}
            continue
        if export_of(m) is not None:  # a suite export: the task its checkpoint was trained on
            task = config_to_dict(m.task.cfg)
        else:
            task = config_to_dict(m.require_task("a copy analysis").cfg)
        d = int(task.get("D", 26))
        check(D is None or d == D, f"{path}: alphabet D={d} differs from the others (D={D})")
        D = d
        models[label] = m
        # the stored record, not train_config: a key an older checkpoint lacks keeps the
        # default this reader always gave it (greedy_eval True), not today's dataclass default
        tc = m.provenance.train.get("config") or {}  # an export's: {} (it keeps none)
        info[label] = {"path": path, "max_len": task.get("max_len"),
                       "context": tc.get("context", None if export_of(m) else 0),
                       "steps": tc.get("steps"),
                       "greedy_eval": tc.get("greedy_eval", True),
                       "samples_seen": (m.provenance.samples_seen if export_of(m) is None
                                        else None)}
    return models, info, D if D is not None else 26


def copy_prompts(model, task: CopyTask, lengths: Iterable[int] = ()):
    """``task`` as ``model`` reads it. A suite model speaks the task's vocabulary: the task
    itself. A pretrained LM (HF_ARCHS) gets the same kind of strings, uniform over the ordinary
    tokens of its tokenizer (``model.ordinary_token_ids()``), in the copy paper's prompt format
    for pretrained models (:class:`tasks.copy.TokenCopyPrompts`).

    Tokens rather than characters: the length L, the n of a duplicated n-gram and the
    n-gram lookup the copy paper describes are all counted in the tokens the model reads; a
    random character string would be cut into tokens differently in each copy by a BPE
    tokenizer, so neither L nor the answer's tokens would be defined.

    ``lengths``: the string lengths to be asked for, checked here so that a prompt longer than
    a pretrained LM's context is one line before any work. A suite export
    (:func:`export_of`) reads its task's token ids, as its checkpoint does: the task itself."""
    if not is_pretrained(model):
        return task
    alphabet = model.ordinary_token_ids()
    sep = model.text_ids(PRETRAINED_SEP)
    check(model.tokenizer.unk_token_id not in sep,
          f"{model.name}: its tokenizer cannot write the separator {PRETRAINED_SEP!r}")
    stateful = bool(getattr(model.cfg, "is_stateful", False))  # an SSM has no context limit
    prompts = TokenCopyPrompts(type(task)(dataclasses.replace(task.cfg, D=len(alphabet))),
                               alphabet, sep, model.bos_ids(),
                               n_ctx=None if stateful else int(model.cfg.n_ctx))
    for L in lengths:
        prompts.check_length(L)
    return prompts


def get(d: dict, *path, default=None):
    """``d[p0][p1]…``, or ``default`` where a key is missing (claim readers use it)."""
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d


def fmt(x, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def ints(text: str) -> list[int]:
    """``"5,10,20"`` -> [5, 10, 20], with one clear error for anything else."""
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"expected comma-separated integers, got {text!r}") from None


def numbers(text: str) -> list[float]:
    """``"0.5,3/4"`` -> [0.5, 0.75] (fractions allowed)."""
    out = []
    for v in text.split(","):
        v = v.strip()
        if not v:
            continue
        try:
            a, _, b = v.partition("/")
            out.append(float(a) / float(b) if b else float(a))
        except (ValueError, ZeroDivisionError):
            raise InputError(f"expected comma-separated numbers, got {text!r}") from None
    return out


def to_jsonable(obj: Any) -> Any:
    """Tensors, numpy values and tuples -> plain JSON types; non-finite floats -> None."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return to_jsonable(obj.tolist())
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return to_jsonable(obj.tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    return obj


def write_outputs(name: str, result: dict, fig, out_dir: str | Path,
                  table: Sequence[Sequence[Any]] | None = None) -> tuple[Path, Path]:
    """Write ``out_dir/name.png`` and ``out_dir/name.json``; print ``table`` (rows) if given."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = write_atomic(out / f"{name}.png", figure_png(fig))
    js = write_atomic(out / f"{name}.json", json.dumps(to_jsonable(result), indent=1))
    if table:
        print_table(table)
    print(f"wrote {png} and {js}")
    return png, js


def print_table(rows: Sequence[Sequence[Any]]) -> None:
    cells = [[f"{c:.4g}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells if i < len(r)) for i in range(max(map(len, cells)))]
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))  # noqa: B905 - ragged rows


