"""``python -m models.hf.export CKPT OUT_DIR [--overwrite]``: a suite checkpoint as a standard
HuggingFace model directory (``config.json``, ``model.safetensors``, tokenizer files), so our
trained models open in ``transformers``, TransformerLens, nnsight or SAELens, offline:

    AutoModelForCausalLM.from_pretrained(OUT_DIR); AutoTokenizer.from_pretrained(OUT_DIR)

Which HF class each model becomes, what is refused and why, and :data:`HOOK_MAP` (our hook ->
HF module) live in :mod:`models.hf.export_map`; the tokenizer in :mod:`models.tokenizer`.

Before the directory is published it is loaded back with ``from_pretrained`` and compared with
ours on a batch of the checkpoint's task, both in float32 (eager attention): the logits, and the
activation at every ``HOOK_MAP`` hook; a difference beyond rounding refuses the export.

Writing: the export is built in a temp directory beside OUT_DIR (``.NAME.XXXXXXXX.export.tmp``,
which :func:`models.load` refuses) and renamed into place, holding ``.NAME.export.lock`` beside
it for the whole run: a second export into the same OUT_DIR at the same time is refused in one
line. Temp directories a killed export left for the same OUT_DIR are removed. An existing
non-empty OUT_DIR needs ``--overwrite``, which replaces only a directory this command wrote (our
files and provenance; anything else is refused, nothing deleted), in one atomic swap where the
system has ``renameat2`` (:func:`publish`); elsewhere the old directory is moved aside first, and
an export killed between the two renames leaves it as ``.NAME.XXXXXXXX.export.old``, which
``models.load(OUT_DIR)`` reports and the next export restores.

Exit codes: 0 written, 2 bad input (one line on stderr, nothing written), 130 interrupted
(Ctrl-C or SIGTERM; the temp directory is removed and OUT_DIR is as it was).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers as tf
from torch import Tensor
from transformers.utils import logging as hf_logging

from models.checkpoint.io import read_checkpoint
from models.checkpoint.paths import check_path, short_path
from models.checkpoint.rebuild import model_from_checkpoint
from models.hf.export_hooks import HFSite, hook_sites
from models.hf.export_map import (
    ExportError,
    HFExport,
    read_provenance,
    to_hf,
)
from models.hf.export_record import MAX_CONFIG_BYTES
from models.loading import EXPORT_TEMP_SUFFIX, interrupted_swap
from seqprobe.atomic import exclusive_lock, umask
from seqprobe.cli import OneLineParser, run_cli
from seqprobe.config import check
from seqprobe.errors import CheckpointError
from tasks.base import make_generator
from tasks.registry import make_task

VERIFY_TOKENS = 256  # task tokens per row checked after the export
VERIFY_PROMPTS = 2  # rows whose greedy generation is checked after the export
VERIFY_GENERATE = 6  # tokens generated per row in that check
VERIFY_RTOL = 1e-4  # of the largest |logit|: float32 rounding is far below, a wrong map far above


# ---------------------------------------------------------------------------- writing
def check_out_dir(out_dir: str | os.PathLike, overwrite: bool,
                  keep: str | os.PathLike | None = None) -> Path:
    """Refuse (one line) an OUT_DIR that is a file, a link, non-empty without ``overwrite`` (or,
    with it, not one of our exports: :func:`not_an_export`), the working directory or one above
    it, one holding ``keep`` (the checkpoint: replacing the directory would delete it), or whose
    parent cannot be written; nothing is created here."""
    out = Path(os.path.abspath(check_path(out_dir)))  # "out/", "." and ".." by their names
    cwd = Path.cwd().resolve()
    check(out.resolve() not in (cwd, *cwd.parents), f"{short_path(out_dir)}: is the working "
          "directory or above it; name a new directory")
    if keep is not None:
        kept = Path(os.path.abspath(keep)).resolve()
        check(out.resolve() not in kept.parents, f"{short_path(out_dir)}: holds the checkpoint "
              f"{short_path(keep)}, which replacing the directory would delete")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    if st is not None:
        check(not stat.S_ISLNK(st.st_mode), f"{short_path(out)}: is a symbolic link; name the "
              "directory itself")
        check(stat.S_ISDIR(st.st_mode), f"{short_path(out)}: exists and is not a directory")
        if any(out.iterdir()):
            check(overwrite, f"{short_path(out)}: directory is not empty; pass --overwrite to "
                  "replace it")
            why = not_an_export(out)
            check(why is None, f"{short_path(out)}: --overwrite replaces only a model directory "
                  f"this command wrote, and this one {why}; remove it yourself or name another")
    parent = out.absolute().parent
    existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
    check(existing is not None and existing.is_dir() and os.access(existing, os.W_OK | os.X_OK),
          f"{short_path(out)}: cannot write in {short_path(existing or parent)}")
    return out


# what save_pretrained writes for our exports (transformers 4.x adds special_tokens_map.json),
# shards of a large model included: a directory with anything else is not one --overwrite takes
EXPORT_FILES = frozenset({"config.json", "generation_config.json", "model.safetensors",
                          "model.safetensors.index.json", "tokenizer.json",
                          "tokenizer_config.json", "special_tokens_map.json"})
SHARD = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")


def not_an_export(directory: Path) -> str | None:
    """Why ``directory`` is not a model directory this command wrote (a phrase), or None: only
    regular files an export writes, and a config.json with our provenance."""
    entries = sorted(os.scandir(directory), key=lambda e: e.name)
    for entry in entries:  # what --overwrite would lose most of first
        if entry.is_symlink() or not entry.is_file():
            kind = ("a link" if entry.is_symlink() else
                    "a subdirectory" if entry.is_dir() else "a special file")
            return f"holds {kind} ({entry.name!r})"
    for entry in entries:
        if entry.name not in EXPORT_FILES and not SHARD.fullmatch(entry.name):
            return f"holds {entry.name!r}, which an export does not write"
    if not (directory / "config.json").is_file():
        return "has no config.json"
    if (directory / "config.json").stat().st_size > MAX_CONFIG_BYTES:
        return "has a config.json larger than any export writes"
    try:
        prov = read_provenance(directory)
    except ExportError:
        prov = None
    return None if prov is not None else "has no seqprobe provenance in its config.json"


def stale_temp_dirs(out: Path) -> list[Path]:
    """The temp directories earlier exports into ``out`` left beside it (killed before their
    rename; :data:`models.loading.EXPORT_TEMP_DIR` names them)."""
    mine = re.compile(re.escape(f".{out.name}.") + EXPORT_TEMP_SUFFIX)
    return sorted(p for p in out.parent.iterdir()
                  if mine.fullmatch(p.name) and p.is_dir() and not p.is_symlink())


RENAME_EXCHANGE = 2  # linux/fs.h: renameat2 swaps the two paths in one step
AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Swap directories ``a`` and ``b`` atomically (Linux ``renameat2(RENAME_EXCHANGE)``):
    True when done, False where the C library, the kernel or the file system lacks it (the
    caller falls back to two renames); another failure is an OSError."""
    try:
        import ctypes  # noqa: PLC0415 - only for this call

        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def publish(tmp: Path, out: Path) -> None:
    """Move the finished export ``tmp`` to ``out``, replacing what is there. Where the system
    can, in one atomic swap (``out`` is a whole export at every instant; the old one, now at
    ``tmp``, is removed after). Else in two renames, the old one first moved aside under a name
    :func:`models.loading.interrupted_swap` recognises: a kill between them leaves no ``out``,
    which ``models.load`` reports and the next export restores before anything else."""
    if not out.exists():
        os.replace(tmp, out)
        return
    if exchange(tmp, out):
        shutil.rmtree(tmp, ignore_errors=True)  # the old export, swapped out
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".export.old", dir=out.parent))
    os.replace(out, old)
    try:
        os.replace(tmp, out)
    except BaseException:
        os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def restore_interrupted(out: Path) -> None:
    """Put back the previous export a stopped ``--overwrite`` left aside (one note on stderr),
    before anything else looks at OUT_DIR; nothing where there is none."""
    aside = interrupted_swap(out)
    if aside is not None:
        os.replace(aside, out)
        print(f"note: restored {short_path(out)} from {aside.name}, left by an export stopped "
              "while replacing it", file=sys.stderr)


@contextlib.contextmanager
def export_lock(out: Path):
    """Hold ``.NAME.export.lock`` beside OUT_DIR for the whole export (removed at its end): a
    second export into the same directory at the same time, from another process or thread, is
    refused in one line (both used to report "wrote", the second silently replacing the first).
    Directories made here for OUT_DIR's parent are removed again if the export fails."""
    parent = out.parent
    new = [p for p in (parent, *parent.parents) if not p.exists()]
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(f"{short_path(parent)}: cannot create it ({e.strerror})") from None
    ok = False
    try:
        with exclusive_lock(
                parent / f".{out.name}.export.lock",
                busy=lambda who: ExportError(
                    f"{short_path(out)}: {who} is exporting into this directory now; wait for "
                    "it to finish (then --overwrite replaces its result)"),
                unusable=lambda why: ExportError(
                    f"{short_path(out)}: cannot lock it for the export ({why})")):
            yield
        ok = True
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                for p in new:
                    p.rmdir()  # only while empty


@contextlib.contextmanager
def _quiet_hf():
    """No progress bars or notices from transformers on the command's output (loading back on
    a CPU without mamba-ssm, every kernel announces its PyTorch fallback)."""
    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _save(exp: HFExport, directory: Path) -> None:
    """``save_pretrained`` of the HF model holding ``exp``'s weights, and its tokenizer."""
    cls = getattr(tf, exp.config.architectures[0])
    with torch.device("meta"):  # no random init of weights that are replaced at once
        model = cls(exp.config)
    model.load_state_dict(exp.state_dict, strict=True, assign=True)
    model.save_pretrained(directory)
    exp.tokenizer.save_pretrained(directory)
    _portable_tokenizer_config(directory / "tokenizer_config.json")


def _portable_tokenizer_config(path: Path) -> None:
    """The tokenizer config in the form transformers 4.x reads too: its class by the name both
    versions know, and the extra specials as ``additional_special_tokens`` (5.x renames them
    on load; 4.x expects a dict under ``extra_special_tokens``)."""
    data = json.loads(path.read_text())
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    if json.loads(path.with_name("tokenizer.json").read_text()).get("post_processor"):
        # <BOS> in front: transformers 5 rebuilds the post-processor from this flag when it is
        # given, so it must agree with tokenizer.json's template (4.x reads the template)
        data["add_bos_token"] = True
    extra = data.pop("extra_special_tokens", [])
    if extra:
        data["additional_special_tokens"] = extra
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def verify_tokens(ckpt: dict, rows: int = 8, length: int = VERIFY_TOKENS) -> Tensor:
    """[rows, ≤ length] tokens of the checkpoint's own task (a training batch: real prompts)."""
    task = make_task(ckpt["task"]["name"], ckpt["task"]["config"])
    tokens = task.batch(rows, make_generator(0)).tokens
    return tokens[:, :length]  # [rows, pos]


def read_site(site: HFSite, args: tuple, kwargs: dict, output) -> Tensor:
    """The value a forward hook (``register_forward_hook(..., with_kwargs=True)``) sees at
    ``site``: the module's first input (by position or by name) or its output."""
    if site.read == "input":
        return args[0] if args else next(iter(kwargs.values()))
    return output[site.item] if isinstance(output, tuple) else output


def compare(model, hf_dir: str | os.PathLike, tokens: Tensor, hf_class_name: str,
            ln_shift: list[float] | None = None) -> tuple[float, dict[str, float]]:
    """(max |ours − HF's| over the logits of ``tokens`` ([batch, pos]), {our hook: max |diff|}
    at every :data:`HOOK_MAP` site our model fires), HF loaded from ``hf_dir`` with eager
    attention, both in float32: the check is of the mapping, so a half-precision checkpoint is
    compared without HF's and our different upcasts in between. ``ln_shift``: what GPT-NeoX's
    final LayerNorm adds to ours (``seqprobe.ln_final_shift``)."""
    model = model.float()
    hf = tf.AutoModelForCausalLM.from_pretrained(hf_dir, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    sites = hook_sites(hf_class_name, model.cfg.n_layers)
    seen: dict[str, Tensor] = {}
    handles = [hf.get_submodule(site.module).register_forward_hook(
        lambda m, a, k, o, name=name, site=site: seen.__setitem__(name, read_site(site, a, k, o)),
        with_kwargs=True) for name, site in sites.items()]
    try:
        with torch.no_grad():
            # only the mapped hooks: caching every hook would keep each layer's SSM states
            ours, cache = model.run_with_cache(tokens, names_filter=list(sites))
            theirs = hf(tokens).logits  # [batch, pos, vocab]
    finally:
        for h in handles:
            h.remove()
    diffs = {}
    for name in sites:
        if name not in cache.cache_dict:  # e.g. resid_mid of a parallel-residual block
            continue
        check(name in seen, f"HOOK_MAP names {sites[name].module} for {name}, and it did not run")
        a, b = cache[name], seen[name]
        if name == "ln_final.hook_out" and ln_shift is not None:
            a = a + torch.tensor(ln_shift, dtype=a.dtype)
        check(a.numel() == b.numel(), f"HOOK_MAP: {name} has shape {tuple(a.shape)} but "
              f"{sites[name].module} {tuple(b.shape)}")
        diffs[name] = float((a.reshape(b.shape) - b).abs().max())
        scale = float(a.abs().max())
        if not diffs[name] <= VERIFY_RTOL * max(1.0, scale):  # a wrong HOOK_MAP entry
            raise ExportError(f"refused: the exported model's {sites[name].module} differs from "
                              f"our {name} by {diffs[name]:.3g} (largest |value| {scale:.3g}); "
                              "nothing written")
    return float((ours - theirs).abs().max()), diffs


def check_generation(model, hf_dir: Path, tokens: Tensor, tol: float, hf_class: str,
                     n_new: int = VERIFY_GENERATE) -> None:
    """Greedy generation of the export as ``models.load`` opens it (TransformerLens' loop,
    with its caches) gives the checkpoint's tokens from the first :data:`VERIFY_PROMPTS` rows
    of ``tokens`` (each cut in half): a decoding path that differs from the full-sequence
    logits (an SSM's cache) is refused like a wrong map. A step where our two best logits
    are within ``tol`` is a tie either may break: the check ends there."""
    from models.generation import greedy_decode
    from models.hf import load_hf  # what models.load boots an export with

    prompts = tokens[:VERIFY_PROMPTS, : max(1, tokens.shape[1] // 2)]
    ours = greedy_decode(model, prompts, n_new)  # [rows, n_new]
    hf = load_hf(hf_dir)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # HF renaming a keyword TL passes
        theirs = hf.generate(prompts, n_new, do_sample=False, stop_at_eos=False,
                             verbose=False)[:, prompts.shape[1]:]
    for row in range(prompts.shape[0]):
        for i in range(n_new):
            if int(ours[row, i]) == int(theirs[row, i]):
                continue
            seq = torch.cat([prompts[row], ours[row, :i]])[None]
            with torch.no_grad():
                logits = model(seq)[0, -1]
            gap = float(logits[ours[row, i]] - logits[theirs[row, i]])
            if gap > tol:
                raise ExportError(
                    f"refused: the exported {hf_class}, loaded with models.load, generates "
                    f"{theirs[row, : i + 1].tolist()} greedily where the checkpoint generates "
                    f"{ours[row, : i + 1].tolist()} (its logits differ by {gap:.3g} there); "
                    "nothing written")
            break  # a tie: the sequences may part here and still both be right


@dataclass(frozen=True)
class ExportReport:
    out_dir: Path
    hf_class: str
    n_tensors: int
    max_logit_diff: float
    max_logit: float
    tokens_checked: int
    notes: list[str]
    rounding: float  # HFExport.rounding
    hook_diffs: dict[str, float] = field(default_factory=dict)  # our hook -> max |diff|


def export(ckpt_path: str | os.PathLike, out_dir: str | os.PathLike, overwrite: bool = False,
           verify: bool = True) -> ExportReport:
    """Write checkpoint ``ckpt_path`` as an HF model directory ``out_dir`` (atomically: built in
    a temp directory beside it, checked, then renamed into place), holding :func:`export_lock`
    throughout; temp directories a killed export left for the same OUT_DIR are removed first.
    Every refusal comes before anything is written."""
    out = check_out_dir(out_dir, overwrite, keep=ckpt_path)
    ckpt = read_checkpoint(ckpt_path)
    exp = to_hf(ckpt)
    model = model_from_checkpoint(ckpt, ckpt_path).float().eval() if verify else None
    parent = out.absolute().parent
    with export_lock(out):
        restore_interrupted(out)  # before the checks: it is OUT_DIR's content again
        # again under the lock: an export that finished meanwhile made OUT_DIR non-empty
        check_out_dir(out_dir, overwrite, keep=ckpt_path)
        for stale in stale_temp_dirs(out):  # ours to remove: no live export holds the lock
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".export.tmp", dir=parent))
        try:
            with _quiet_hf():
                _save(exp, tmp)
                diff, top, n, hook_diffs = 0.0, 0.0, 0, {}
                if model is not None:
                    tokens = verify_tokens(ckpt)
                    with torch.no_grad():
                        top = float(model(tokens).abs().max())
                    diff, hook_diffs = compare(model, tmp, tokens, exp.config.architectures[0],
                                               exp.config.seqprobe.get("ln_final_shift"))
                    n = tokens.numel()
                    tol = VERIFY_RTOL * max(1.0, top) + 2 * exp.rounding
                    if not diff <= tol:
                        raise ExportError(f"refused: the exported {exp.config.architectures[0]} "
                                          f"gives logits {diff:.3g} away from the checkpoint's "
                                          f"(largest |logit| {top:.3g}); nothing written")
                    check_generation(model, tmp, tokens, tol, exp.config.architectures[0])
            mask = umask()  # mkdtemp's directory is private, and some writers' files are too
            os.chmod(tmp, 0o777 & ~mask)
            for f in tmp.iterdir():
                os.chmod(f, 0o666 & ~mask)
            publish(tmp, out)  # an empty directory, or --overwrite: swapped, the old removed
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return ExportReport(out, exp.config.architectures[0], len(exp.state_dict), diff, top, n,
                        exp.notes, exp.rounding, hook_diffs)


# ---------------------------------------------------------------------------- command line
def _main(argv: list[str] | None) -> int:
    p = OneLineParser(prog="python -m models.hf.export",
                      description="Write a suite checkpoint as a HuggingFace model directory "
                                  "(config, safetensors weights, tokenizer).")
    p.add_argument("checkpoint", help="a suite checkpoint (.pt)")
    p.add_argument("out_dir", help="the HF model directory to write (must be new or empty)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace OUT_DIR when it is an export this command wrote")
    args = p.parse_args(argv)
    try:
        r = export(args.checkpoint, args.out_dir, overwrite=args.overwrite)
    except OSError as e:  # disk full, permissions changed under us: nothing was published
        raise CheckpointError(f"{short_path(args.out_dir)}: cannot write ({e.strerror or e})"
                              ) from None
    print(f"wrote {args.out_dir} ({r.hf_class}, {r.n_tensors} tensors, tokenizer)")
    for note in r.notes:
        print(f"note: {note}")
    print(f"checked: logits of from_pretrained({args.out_dir}) equal the checkpoint's on "
          f"{r.tokens_checked} task tokens: max |diff| = {r.max_logit_diff:.2e} "
          f"(largest |logit| {r.max_logit:.3g})")
    if r.hook_diffs:
        worst = max(r.hook_diffs, key=r.hook_diffs.get)
        print(f"checked: activations at {len(r.hook_diffs)} hooks (models.hf.export.HOOK_MAP) "
              f"equal ours: max |diff| = {r.hook_diffs[worst]:.2e} ({worst})")
    return 0


def _sigterm_as_ctrl_c(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The command; SIGTERM is Ctrl-C here (one line, exit 130, the temp directory removed)."""
    old = None
    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGTERM, _sigterm_as_ctrl_c)
    try:
        return run_cli(_main, argv)
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


if __name__ == "__main__":
    sys.exit(main())
