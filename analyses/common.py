"""What every analysis shares: the one ``main`` skeleton (:func:`run_analysis`), loading
checkpoints (:func:`load_model`, exports and pretrained LMs told apart), flag helpers, and
writing outputs. Its description for the reproduce plan (``Figure``, with the paper's ``Claim``
readers) is in :mod:`analyses.claims`; the copy paper's models in :mod:`analyses.copy_models`.

An analysis module has ``compute(...) -> dict`` (JSON-serialisable numbers), ``plot(result) ->
Figure``, ``table(result) -> rows``, a ``FIGURE`` (title, paper, claims, the zoo recipes it
trains) and ``main(argv)``, which is :func:`run_analysis`: parse the flags, check the output
directory, get the checkpoints (given, or the recipes from :mod:`analyses.zoo` with ``--train``),
compute, write ``DIR/NAME.png`` and ``DIR/NAME.json`` and print the table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from analyses import zoo
from analyses.zoo.catalog import is_zoo_ref, parse_zoo_ref
from models.checkpoint.io import file_sha256, read_once
from models.checkpoint.paths import is_hf_source
from models.loading import load
from models.memory import check_evaluation_fits
from models.registry import HF_ARCHS
from seqprobe import flags
from seqprobe.atomic import output_lock, write_atomic
from seqprobe.cli import (
    OneLineParser,
    add_backend_arguments,
    add_device_argument,
    add_level_arguments,
    launched,
    run_cli,
)
from seqprobe.config import check
from seqprobe.device import resolve_device
from seqprobe.errors import InputError

if TYPE_CHECKING:  # annotations only: Figure is analyses.claims', Builder training's
    from analyses.claims import Figure
    from models.train.runconfig import Builder

# Training (models.train, the zoo's runs), the scheduler (seqprobe.sweep), the dry run and the
# HF export reader are imported where a command uses them, not here: an analysis' --help, a
# refusal and a run on given checkpoints import none of them; matplotlib (figures.style) is
# imported where a figure is drawn.




@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint an analysis was given: ``label`` is the zoo recipe's name or the file's;
    ``recipe`` and ``level``: the zoo recipe it was served as (``--train``, ``zoo:NAME``),
    None for a file given by path (the reproduce index tells a level's own results apart from
    a user's model by them: :func:`models_used`)."""

    label: str
    path: str
    recipe: str | None = None
    level: str | None = None


def short_hash(path: str | os.PathLike, chars: int = 12) -> str | None:
    """The first ``chars`` hex digits of the SHA-256 of a checkpoint file's bytes (of every
    file of a model directory, in name order): names the weights a result came from, however
    the file was named. None for what is not on this disk (a hub name)."""
    p = Path(path)
    if p.is_file():  # a checkpoint file: the digest of the read that loaded it, where it did
        return file_sha256(p)[:chars]
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else []
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(p)).encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:chars]


def models_used(checkpoints: Sequence[Checkpoint]) -> list[dict]:
    """What an analysis' JSON records of its checkpoints (``models_used``): name, path, the zoo
    recipe and level it was served as (None: a file given by path) and its :func:`short_hash`,
    so an index or a reader can say which model a figure shows."""
    return [{"name": c.label, "path": c.path, "recipe": c.recipe, "level": c.level,
             "sha256": short_hash(c.path)} for c in checkpoints]


def base_parser(name: str, description: str, checkpoints: bool = True,
                training: bool = False) -> argparse.ArgumentParser:
    """The flags every analysis takes: ``--out``, ``--device``, ``--seed`` (+ levels)."""
    p = OneLineParser(prog=f"python -m analyses.{name}", description=description)
    if checkpoints:
        p.add_argument("checkpoints", nargs="*",
                       help="suite checkpoint file(s) (.pt) or zoo name(s) (zoo:copy/rope, "
                       "zoo:NAME@LEVEL: the cached checkpoint, never trained), a suite export "
                       "(python -m models.hf.export) as the checkpoint it came from, or "
                       "HuggingFace causal LM(s) where the analysis takes them: a model "
                       "directory or a hub name")
    # relative: under the folder the command runs in (the clone's own figures/out/NAME when
    # run from the clone, as the docs show), never inside an installed clone from elsewhere
    p.add_argument("--out", default=str(Path("figures", "out", name)),
                   help=f"output directory (default: figures/out/{name}/ under the current "
                   "folder, this analysis' own: never the reproduction's figures in "
                   "figures/out/)")
    add_device_argument(p)
    p.add_argument("--seed", type=flags.flag("--seed"), default=0,
                   help="seed of the evaluation data")
    if training:
        add_level_arguments(p)
        p.add_argument("--dry-run", action="store_true",
                       help="compute nothing: build each model --train LEVEL (else the "
                       "level) would train at its real size, run two optimizer steps, print "
                       "sizes, step times and projected H100 hours (analyses.zoo.dryrun); "
                       "writes OUT/NAME_dry_run.json, exit 1 if any cannot run")
        add_backend_arguments(p)  # --ray: the models to train (or cells) on Ray
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
                 dry_run_configs: Callable[[argparse.Namespace], Sequence[tuple[str, Builder]]]
                 | None = None, failed_key: str | None = None) -> int:
    """The ``main`` of an analysis. ``compute(args, checkpoints)`` gets the checkpoints given
    on the command line and, with ``--train LEVEL``, those of ``recipes(args)`` (default:
    ``figure.recipes(LEVEL)``) from the zoo, trained first where not cached.

    With ``--dry-run`` nothing is computed: those recipes and the models of
    ``dry_run_configs(args)`` (default: ``figure.dry_run_configs(LEVEL)``) take two steps each
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
        check(not launched(), f"analyses.{name} runs in one process, not under "
              "torchrun: train its recipes with `torchrun -m analyses.zoo train NAME...`, then "
              "run the analysis (it reads them from the cache)")
        if training:
            for level in dict.fromkeys(x for x in (args.level, args.train) if x):
                check(level in figure.levels, f"analyses.{name} has no {level} level (it has "
                      f"{', '.join(figure.levels)})")
        check_output_dir(args.out)
        resolve_device(args.device)
        if threads is not None:  # tiny models: more threads only contend on shared cores
            torch.set_num_threads(max(1, min(torch.get_num_threads(), threads)))
        if training and args.dry_run:
            from analyses.zoo import dryrun

            args.train = args.train or args.level  # what the recipe functions read
            names = list(recipes(args) if recipes else figure.recipes(args.train))
            own = (dry_run_configs(args) if dry_run_configs
                   else figure.dry_run_configs(args.train))
            return dryrun.report([*dryrun.recipe_builders(names, args.train), *own],
                                 args.device, args.out, f"{name}_dry_run")
        offset = zoo.seed_offset()  # read once, passed down (reproduce --seed-offset sets it)
        given = [given_checkpoint(c, getattr(args, "cache_dir", None), offset)
                 for c in getattr(args, "checkpoints", [])]
        if training and args.train:
            from models.train.cache import check_cache_dir
            from seqprobe.sweep import Failed, backend_of

            names = list(recipes(args) if recipes else figure.recipes(args.train))
            for n in names:  # every name checked before any training
                zoo.recipe(n).parts(args.train)
            check_cache_dir(args.cache_dir, write=False)  # a read-only cache serves what it has
            backend = None
            if args.ray is not None and names:  # not cached yet: on Ray, retried
                backend = backend_of(args, os.cpu_count() or 1, args.device, num_cpus=max(
                    zoo.recipe(n).slots for n in names))
            # the one way recipes are trained: in waves, as ensembles where they pay off
            done = zoo.train_recipes(names, args.train, args.cache_dir, args.device, backend,
                                     progress=False, seed_offset=offset)
            failed = [f"{n} ({f.error}; {f.attempts} attempts)" for n, f in done.items()
                      if isinstance(f, Failed)]
            check(not failed, f"training failed: {', '.join(failed)}")
            given += [Checkpoint(n, str(done[n]), n, args.train) for n in names]
        with output_lock(args.out, name):  # one writer of these outputs at a time
            result = compute(args, given)
            result.setdefault("models_used", models_used(given))
            out_name = output_name(args, result) if output_name else name
            from figures.style import caption_text

            write_outputs(out_name, result, plot(result), args.out,
                          table(result) if table else None,
                          caption_text(result, args.level, getattr(args, "seed", None)))
        if failed_key and result.get(failed_key):
            from seqprobe.sweep import EXIT_SOME_FAILED

            return EXIT_SOME_FAILED
        return 0

    def read_once_body(argv):  # each checkpoint file read once: looked up, loaded, hashed
        with read_once():
            return body(argv)

    return run_cli(read_once_body, argv)


def given_checkpoint(path: str, cache_dir: str | Path | None = None,
                     seed_offset: int = 0) -> Checkpoint:
    """A checkpoint named on the command line: a file or model directory as it is, or a zoo
    name (``zoo:NAME[@LEVEL]``) as its cached file in ``cache_dir`` (the analysis'
    ``--cache-dir``; the recipe's seed shifted by ``seed_offset``), labelled with the recipe's
    name as ``--train`` labels it. A zoo name not trained yet is one line saying how to train
    it, before any work (nothing is trained)."""
    if is_zoo_ref(path):
        name, level = parse_zoo_ref(path)
        return Checkpoint(name, str(zoo.resolve(path, cache_dir, seed_offset=seed_offset)),
                          name, level)
    return Checkpoint(Path(path).stem, str(path))


def export_of_dir(path: str | os.PathLike) -> dict | None:
    """The provenance a suite export (``python -m models.hf.export``) stored in ``path``'s
    config.json (``seqprobe``: arch, model config, task, step), or None for anything else (a
    checkpoint file, a hub name, another HF model, an unreadable config: the loader says
    what is wrong with it)."""
    if not (Path(path).is_dir() and (Path(path) / "config.json").is_file()):
        return None
    from models.hf.export_map import ExportError, read_provenance  # imports transformers

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
    the checkpoint to give instead. A zoo name (``zoo:NAME[@LEVEL]``) opens the recipe's cached
    checkpoint (:func:`given_checkpoint`); a bare recipe name that reads as a hub name and is
    not one says how to open the recipe."""
    if is_zoo_ref(path):
        path = given_checkpoint(path).path
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
    model = _load_or_hint(path, resolve_device(device), archs)
    check_evaluation_fits(model, str(path))  # in-range task lengths can still ask for GBs
    # a suite model's task, or an export's (its provenance); a pretrained LM has none
    if tasks is not None and not is_pretrained(model) and model.task is not None:
        task = model.task.name
        check(task in set(tasks), f"{path}: this analysis needs a checkpoint trained on "
              f"{' or '.join(sorted(set(tasks)))}, but the file's task is {task!r}")
    return model


def _load_or_hint(path: str, device: torch.device, archs: Iterable[str] | None):
    """:func:`models.loading.load`; a zoo recipe's name given without ``zoo:`` reads as a hub
    name there, and its error says how to open the recipe."""
    try:
        return load(path, device=device, archs=archs)
    except InputError as e:
        hint = None if Path(path).exists() or not is_hf_source(path) else zoo.hint(str(path))
        if hint is None:
            raise
        from models.hf.checks import HFError  # imported already: the load that failed did

        raise HFError(f"{e}; {hint}") from None


def need(checkpoints: Sequence[Checkpoint], what: str = "checkpoint(s)") -> None:
    check(len(checkpoints) >= 1, f"give {what} (or --train --level quick)")


def get(d: dict, *path, default=None):
    """``d[p0][p1]…``, or ``default`` where a key is missing (claim readers use it)."""
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d


def fmt(x, pattern: str = ".3f") -> str:
    return "n/a" if x is None else format(x, pattern)


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
                  table: Sequence[Sequence[Any]] | None = None,
                  caption: str | None = None) -> tuple[Path, Path]:
    """Write ``out_dir/name.png`` (``caption``, the run's settings, under the figure) and
    ``out_dir/name.json``; print ``table`` (rows) if given."""
    from figures.style import figure_png

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = write_atomic(out / f"{name}.png", figure_png(fig, caption=caption))
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
