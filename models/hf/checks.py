"""The checks :func:`models.hf.load_hf` runs on a model it did not train, before and after
loading (see :mod:`models.hf`'s docstring): a model directory is data, never code, and every
refusal is one :class:`~models.hf.HFError` line (defined here). Imported back into
:mod:`models.hf`, where every name here is also found.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import stat
import warnings
from pathlib import Path

import torch
from transformers import PretrainedConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
)

from models.checkpoint.paths import FILE_KINDS
from models.checkpoint.rebuild import DEEP
from models.checkpoint.untrusted import (
    MAX_REBUILT_BYTES,
    ZIP_MAGIC,
    check_task_bounds,
)
from models.checkpoint.untrusted import (
    check_tensor_storage as _check_tensor_storage,
)
from models.hf.export_record import MAX_CONFIG_BYTES, record_problem
from seqprobe.config import config_from_dict
from seqprobe.device import check_fits
from seqprobe.errors import InputError
from seqprobe.memory import human_bytes
from tasks.registry import TASKS, task_class

CAUSAL_CLASSES = frozenset(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())


class HFError(InputError):
    """A HuggingFace model that cannot be loaded (one line; a ``InputError``, so CLIs exit 2)."""


# defined here, where the checks raise it, without models.hf and models.hf.checks importing
# each other; its public name stays models.hf.HFError (pickles, the error tree, the docs)
HFError.__module__ = "models.hf"

# tokenizer and other text files (.json, .txt, .model, .jinja) are read whole, and a tokenizer
# holds many times its file's size once parsed: several times the largest published ones
MAX_TEXT_FILE_BYTES = 2**27
TEXT_SUFFIXES = (".json", ".txt", ".model", ".jinja")
# the weight files transformers reads, in the order it prefers them (single file, then shards)
SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
TORCH_BIN, TORCH_BIN_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"



def _first_line(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kind(mode: int) -> str:
    return next((k for test, k in FILE_KINDS if test(mode)), "not a regular file")


def _regular_file(path: Path, source: str, what: str, limit: int | None = None) -> int:
    """The size of ``path``, a regular file (a FIFO would block the read, a device never end),
    non-empty and within ``limit`` bytes; otherwise one line (``what`` names its role)."""
    what = f"{what} {path.name}".strip()
    try:
        st = os.stat(path)
    except OSError as e:
        raise HFError(f"{source}: its {what} cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise HFError(f"{source}: its {what} is {_kind(st.st_mode)}, not a file")
    if st.st_size == 0:
        raise HFError(f"{source}: its {what} is an empty file")
    if limit is not None and st.st_size > limit:
        raise HFError(f"{source}: its {what} is {human_bytes(st.st_size)}, more "
                      f"than such a file ever is ({human_bytes(limit)})")
    return st.st_size


def read_json(path: Path, source: str, what: str) -> dict:
    """A small JSON object file (a config, a shard index), or one line."""
    _regular_file(path, source, what, MAX_CONFIG_BYTES)
    what = f"{what} {path.name}".strip()
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as e:
        raise HFError(f"{source}: its {what} is not readable JSON: "
                      f"{_first_line(e, 120)}") from None
    if not isinstance(data, dict):
        raise HFError(f"{source}: its {what} holds a JSON {type(data).__name__}, "
                      "not an object")
    return data


def check_local_dir(directory: str) -> dict:
    """``config.json`` of a model directory as JSON, refused where transformers would have to
    run the directory's own Python to use it (``auto_map`` without a model type it knows);
    and no entry of the directory that would block a reader (a FIFO, a device) or a text file
    (tokenizer, template) larger than :data:`MAX_TEXT_FILE_BYTES`."""
    with os.scandir(directory) as entries:
        for entry in entries:
            try:
                st = os.stat(entry.path)
            except OSError:
                continue  # a dangling link: refused below if it is a file the loader needs
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise HFError(f"{directory}: {entry.name[:80]} in it is {_kind(st.st_mode)}, "
                              "not a file (reading it could block or never end)")
            if entry.name.endswith(TEXT_SUFFIXES):
                _regular_file(Path(entry.path), directory, "", MAX_TEXT_FILE_BYTES)
    raw = read_json(Path(directory) / "config.json", directory, "")
    model_type = raw.get("model_type")
    if "auto_map" in raw and not (isinstance(model_type, str)
                                  and model_type in CONFIG_MAPPING_NAMES):
        kind = (f"model type {str(model_type)[:40]!r}, which transformers does not know"
                if model_type is not None else "no model_type transformers knows")
        raise HFError(f"{directory}: its config.json asks to run Python code from the model "
                      f"directory (auto_map) and names {kind}; the suite never runs a model's "
                      "own code")
    return raw


def check_provenance(config: PretrainedConfig, source: str) -> None:
    """The task our export stored in the config (``seqprobe``; analyses rebuild it to probe the
    model) is checked as a ``.pt`` checkpoint's task is: a known task, a valid config, sizes
    within :data:`models.checkpoint.MAX_TASK_INT`."""
    prov = getattr(config, "seqprobe", None)
    if prov is None:
        return
    where = f"{source}: its provenance (config.json 'seqprobe')"
    if not isinstance(prov, dict):
        raise HFError(f"{where} is a {type(prov).__name__}, not an object")
    problem = record_problem(prov, config)
    if problem:
        raise HFError(f"{where}: {problem}")
    task = prov.get("task")
    if task is None:
        return
    if not (isinstance(task, dict) and isinstance(task.get("name"), str)
            and isinstance(task.get("config"), dict)):
        raise HFError(f"{where}: 'task' must be {{'name': str, 'config': object}}")
    name = task["name"]
    if name not in TASKS:
        raise HFError(f"{where}: unknown task {name[:80]!r}; allowed: {', '.join(sorted(TASKS))}")
    try:
        check_task_bounds(name, task["config"])
        config_from_dict(task_class(name).config_cls, task["config"])
    except InputError as e:
        raise HFError(f"{where}: {_first_line(e)}") from None
    except Exception as e:  # noqa: BLE001 - a config value no check anticipated
        raise HFError(f"{where}: invalid task config ({type(e).__name__}: "
                      f"{_first_line(e, 120)})") from None


# ---------------------------------------------------------------------------- weight files
def _shards(directory: Path, index: str, source: str) -> list[Path]:
    """The shard files a ``*.index.json`` names (plain file names inside the directory)."""
    weight_map = read_json(directory / index, source, "weight index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise HFError(f"{source}: its {index} has no 'weight_map' of tensor names to files")
    names = set()
    for v in weight_map.values():
        if not (isinstance(v, str) and v and Path(v).name == v and v not in (".", "..")):
            raise HFError(f"{source}: its {index} names {str(v)[:80]!r}, not a file name in "
                          "the model directory")
        names.add(v)
    return [directory / n for n in sorted(names)]


def weight_files(directory: str) -> list[Path]:
    """The weight files transformers would read from a model directory (its order of
    preference), or one line when there are none."""
    d = Path(directory)
    for single, index in ((SAFETENSORS, SAFETENSORS_INDEX), (TORCH_BIN, TORCH_BIN_INDEX)):
        if os.path.lexists(d / single):
            return [d / single]
        if os.path.lexists(d / index):
            return _shards(d, index, directory)
    raise HFError(f"{directory}: no weights ({SAFETENSORS} or {TORCH_BIN}, or their sharded "
                  "*.index.json); the suite analyses trained weights")


# safetensors' dtype names of floating-point tensors (what a trained weight is stored as)
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}


def _safetensors_shapes(path: Path, source: str) -> dict[str, tuple[int, ...]]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {}
            for k in f.keys():
                sl = f.get_slice(k)
                shapes[k] = _Shape(sl.get_shape(), sl.get_dtype() in FLOAT_DTYPES)
            return shapes
    except Exception as e:  # noqa: BLE001 - SafetensorError and kin: a damaged or foreign file
        raise HFError(f"{source}: {path.name} is not a readable safetensors file: "
                      f"{_first_line(e, 120)}") from None


def _bin_shapes(path: Path, source: str) -> dict[str, tuple[int, ...]]:
    """A ``pytorch_model.bin`` read only as tensors (``weights_only=True``: nothing in it is
    imported or called), memory-mapped when it is the zip archive ``torch.save`` writes."""
    with open(path, "rb") as f:
        zipped = f.read(len(ZIP_MAGIC)) == ZIP_MAGIC
    try:
        with warnings.catch_warnings():  # torch's notes on foreign pickles: the line says why
            warnings.simplefilter("ignore")
            sd = torch.load(path, map_location="cpu", weights_only=True, mmap=zipped)
    except pickle.UnpicklingError:
        raise HFError(f"{source}: {path.name} is refused: it holds pickled objects other than "
                      "tensors (torch.load(weights_only=True) does not build them; nothing in "
                      "it was run)") from None
    except Exception as e:  # noqa: BLE001 - a truncated archive, a foreign file, …
        raise HFError(f"{source}: {path.name} is refused: not a file of plain tensors that "
                      f"torch.load(weights_only=True) reads ({_first_line(e, 100)})") from None
    if not (isinstance(sd, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                         for k, v in sd.items())):
        raise HFError(f"{source}: {path.name} does not map weight names to tensors")
    for k, t in sd.items():
        try:
            _check_tensor_storage(t, path.name, f"tensor {k[:80]}")
        except InputError as e:
            raise HFError(f"{source}: {e}") from None
    return {k: _Shape(t.shape, t.is_floating_point()) for k, t in sd.items()}


class _Shape(tuple):
    """A stored tensor's shape, and whether it is stored as floating point."""

    def __new__(cls, shape, floating: bool):
        out = super().__new__(cls, (int(d) for d in shape))
        out.floating = floating
        return out


def stored_shapes(directory: str) -> dict[str, tuple[int, ...]]:
    """Every stored tensor's shape, read from the weight files' headers (safetensors) or
    memory-mapped (``.bin``), before any weight is loaded."""
    shapes: dict[str, tuple[int, ...]] = {}
    for path in weight_files(directory):
        _regular_file(path, directory, "weight file")
        read = _safetensors_shapes if path.name.endswith(".safetensors") else _bin_shapes
        shapes.update(read(path, directory))
    return shapes


# ---------------------------------------------------------------------------- sizes
def _meta_sizes(cls, config: PretrainedConfig) -> tuple[int, int, dict[str, tuple[int, ...]]]:
    """``(parameters, bytes of buffers not in the state dict, parameter shapes)`` of the model
    ``config`` describes, built as class ``cls`` on the meta device (no memory)."""
    with torch.device("meta"):
        if hasattr(cls, "from_config"):  # an Auto class
            model = cls.from_config(config, trust_remote_code=False)
        else:
            model = cls._from_config(config)
    persistent = set(model.state_dict())
    rebuilt = sum(b.numel() * b.element_size() for name, b in model.named_buffers()
                  if name not in persistent)
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    return sum(p.numel() for p in model.parameters()), rebuilt, shapes


def _with_layers(config: PretrainedConfig, n: int) -> PretrainedConfig:
    out = copy.deepcopy(config)
    out.num_hidden_layers = n
    return out


def meta_sizes(cls, config: PretrainedConfig, source: str
               ) -> tuple[int, int, dict[str, tuple[int, ...]]]:
    """:func:`_meta_sizes`, a stack deeper than :data:`models.checkpoint.DEEP` extrapolated
    from one- and two-layer builds as for ``.pt`` files (a meta build of 10^6 layers would
    itself take minutes); a config that cannot be built is one line."""
    n = getattr(config, "num_hidden_layers", None)
    try:
        if isinstance(n, int) and not isinstance(n, bool) and n > DEEP:
            try:
                one = _meta_sizes(cls, _with_layers(config, 1))
                two = _meta_sizes(cls, _with_layers(config, 2))
            except Exception:  # noqa: BLE001 - a config tied to its depth: refuse below
                raise HFError(f"{source}: its config asks for {n:,} layers, and its size "
                              "cannot be estimated from a shallower build") from None
            (p1, r1, _), (p2, r2, shapes) = one, two  # shapes of the first two layers only
            return p1 + (n - 1) * (p2 - p1), r1 + (n - 1) * (r2 - r1), shapes
        return _meta_sizes(cls, config)
    except HFError:
        raise
    except Exception as e:  # noqa: BLE001 - a config value no check anticipated
        raise HFError(f"{source}: the model its config describes cannot be built: "
                      f"{type(e).__name__}: {_first_line(e, 120)}") from None


def check_footprint(cls, config: PretrainedConfig, stored: dict[str, tuple[int, ...]] | None,
                    source: str, dtype: torch.dtype, device: torch.device) -> None:
    """Before any weight is allocated: the model the config describes must be covered by the
    stored values (a parameter the files lack would be randomly initialised, and a config
    can ask for gigabytes of them), rebuild no more than :data:`MAX_REBUILT_BYTES` of
    buffers beyond the stored weights, and fit in memory. ``stored``: the weight files'
    shapes (None for a hub model, whose files are not on disk before loading)."""
    n_layers = getattr(config, "num_hidden_layers", None)
    if stored is not None and isinstance(n_layers, int) and n_layers > len(stored):
        raise HFError(f"{source}: its config asks for {n_layers:,} layers, but its weight "
                      f"files hold only {len(stored):,} tensors")
    params, rebuilt, shapes = meta_sizes(cls, config, source)
    itemsize = dtype.itemsize
    if stored is not None:
        wrong = [f"{k} is {list(stored[k])} in the weight file but {list(s)} for the config"
                 for k, s in shapes.items() if k in stored and stored[k] != s]
        # a float weight stored as ints (or bools) would load truncated, silently
        wrong += [f"{k} is stored as integers, but it is a floating-point weight"
                  for k in shapes if k in stored and not getattr(stored[k], "floating", True)]
        if wrong:
            raise HFError(f"{source}: its weights do not match its config: {wrong[0]}"
                          + (f" (+{len(wrong) - 1} more)" if len(wrong) > 1 else ""))
        values = sum(_numel(s) for s in stored.values())
        if params > values:  # not named: files may use older names that transformers renames
            raise HFError(f"{source}: its config describes {params:,} parameters, but its "
                          f"weight files hold only {values:,} values (the rest would be "
                          "random, not trained weights)")
        if rebuilt > values * itemsize + MAX_REBUILT_BYTES:
            raise HFError(f"{source}: its config asks for {human_bytes(rebuilt)} of buffers "
                          f"that are not stored, far more than its weights")
    try:
        check_fits(params * itemsize + rebuilt, f"{source}: the model")
        if device.type != "cpu":
            check_fits(params * itemsize + rebuilt, f"{source}: the model", device)
    except InputError as e:
        raise HFError(str(e)) from None


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def check_loaded(info: dict, source: str) -> None:
    """Refuse weights that do not match the model: missing ones (randomly initialised),
    unexpected ones (meant for another model), mis-shaped ones (named with both shapes)."""
    missing, unexpected = sorted(info.get("missing_keys") or ()), sorted(
        info.get("unexpected_keys") or ())
    mismatched = sorted(info.get("mismatched_keys") or (), key=str)
    parts = []
    if missing:
        parts.append(f"missing {missing[:3]}{' …' if len(missing) > 3 else ''} (they would be "
                     "random)")
    if unexpected:
        parts.append(f"unexpected {[k[:80] for k in unexpected[:3]]}"
                     f"{' …' if len(unexpected) > 3 else ''}")
    if mismatched:
        key, file_shape, model_shape = mismatched[0]
        parts.append(f"{key} is {list(file_shape)} in the weight file but "
                     f"{list(model_shape)} for the config"
                     + (f" (+{len(mismatched) - 1} more)" if len(mismatched) > 1 else ""))
    if info.get("error_msgs"):
        parts.append(_first_line(info["error_msgs"][0], 120))
    if parts:
        raise HFError(f"{source}: its weights do not match its config: {'; '.join(parts)}")


def check_finite(model: torch.nn.Module, source: str) -> None:
    """No NaN / inf weight (as for ``.pt`` files): an analysis of them would be meaningless."""
    for name, t in model.state_dict().items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            name = name.replace("._original_component", "")  # the bridge's wrapper, not HF's
            raise HFError(f"{source}: refused: its weights hold NaN or infinite values "
                          f"({bad:,} of {t.numel():,} in {name[:80]}); an analysis of them "
                          "would be meaningless")


def check_forward(model: torch.nn.Module, config: PretrainedConfig, source: str) -> None:
    """Finite weights can still give NaN logits through a config value (a negative
    ``layer_norm_eps`` takes the root of a negative number): one short forward pass decides,
    before an analysis would report NaN scores as results."""
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    tokens = torch.arange(4, device=next(model.parameters()).device).remainder(max(vocab, 1))
    try:
        with torch.no_grad():
            logits = model(input_ids=tokens[None]).logits
    except Exception as e:  # noqa: BLE001 - a config value no check anticipated
        raise HFError(f"{source}: a forward pass on four tokens fails: {type(e).__name__}: "
                      f"{_first_line(e, 120)}") from None
    if not bool(torch.isfinite(logits).all()):
        odd = [f"{k} = {v}" for k, v in config.to_dict().items()
               if "eps" in k and isinstance(v, (int, float)) and not (v >= 0)]
        raise HFError(f"{source}: refused: its logits on four tokens are NaN or infinite"
                      + (f" (its config has {', '.join(odd[:2])})" if odd else "")
                      + "; an analysis of them would be meaningless")

def check_causal(config: PretrainedConfig, source: str) -> None:
    """Refuse what is not a decoder-only causal LM (the analyses read next-token logits)."""
    model_type = getattr(config, "model_type", "?")
    classes = getattr(config, "architectures", None) or []
    if not (isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes)):
        raise HFError(f"{source}: its config's architectures must be a list of class names, "
                      f"got {str(classes)[:60]!r}")
    classes = list(classes)
    if getattr(config, "is_encoder_decoder", False):
        raise HFError(f"{source}: a {model_type!r} encoder-decoder model; the suite needs a "
                      "decoder-only causal language model (GPT-NeoX, GPT-2, Llama, Mamba …)")
    encoder = model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(
        config, "is_decoder", False)
    causal = (classes[0] in CAUSAL_CLASSES) if classes else (
        model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if encoder or not causal:
        what = classes[0] if classes else model_type
        raise HFError(f"{source}: {what} is not a causal language model (an encoder or another "
                      "head); the suite needs a decoder-only causal LM (GPT-NeoX, GPT-2, Llama, "
                      "Mamba …)")


def check_archs(arch: str, archs, source: str) -> None:
    if archs is None:
        return
    allowed = sorted(set(archs))
    if arch not in allowed:
        raise HFError(f"{source}: this analysis needs a {' or '.join(allowed)} model, but this "
                      f"HuggingFace model is a {arch!r} (see models.hf.HF_ARCHS)")
