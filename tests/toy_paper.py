"""The toy fifth paper of tests/e2e/test_adding_a_paper.py, as the files a person writes for one
(docs/adding-a-paper.md lists them in this order): a new architecture (``echo``, its own
config class with a numeric field of its own, ``decay``), a new task (``toy_echo``, whose
length field is ``span``), a probe, the paper's zoo module (its level rows and its recipe at
quick and medium), its analysis (a FIGURE with two claims, its scale sentences and a numeric
option of its own, ``--rows``: a settings field, its flag made from it) and the tests of its
claim readers. The one edit to an existing file, a row in each table of seqprobe/registry.toml
(its arch, task, probe, paper and analysis), is :func:`register`.

Kept as text here, not as files under tests/: written into a copy of the repository, where the
suite's own registry reads them as it reads a real paper's rows (nothing patched at run time).
"""

from __future__ import annotations

import re
import textwrap

NAME = "toy_echo"  # the paper's analysis, zoo module, probe and task
ARCH = "echo"
RECIPE = f"{NAME}/{ARCH}"
READERS = ("claim_repeats", "claim_longer")

MODEL = '''
"""Toy architecture (tests/toy_paper.py): each block adds a decaying echo of the positions
before it to the residual stream.

    e_t = (1 - decay) * sum_{s <= t} decay^(t - s) * W x_s,    x_t <- x_t + e_t
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

import torch
from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from models.base import SuiteModel, TLConfigFields
from models.contract import Shapes
from models.layers import RMSNorm
from seqprobe.config import check
from seqprobe.flags import EPS_FIELD, LAYERS_FIELD, VOCAB_FIELD, WIDTH_FIELD, bound


@dataclass(frozen=True)
class EchoConfig(TLConfigFields):
    vocab_size: int = field(default=8, metadata=VOCAB_FIELD)
    d_model: int = field(default=16, metadata=WIDTH_FIELD)
    n_layers: int = field(default=1, metadata=LAYERS_FIELD)
    decay: float = field(default=0.5, metadata=bound(0.0, 1.0, "the echo's decay per position"))
    norm_eps: float = field(default=1e-5, metadata=EPS_FIELD)

    @property
    def normalization_type(self) -> str | None:
        return "RMS"

    @property
    def n_heads(self) -> int:
        return 1  # no heads; TransformerLens' patching reads the field


class EchoBlock(nn.Module):
    def __init__(self, cfg: EchoConfig):
        super().__init__()
        self.decay = cfg.decay
        self.W = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_echo = HookPoint()  # [batch, pos, d_model] e_t
        self.hook_resid_post = HookPoint()  # [batch, pos, d_model]

    def forward(self, x: Float[Tensor, "batch pos d"]) -> Float[Tensor, "batch pos d"]:
        x = self.hook_resid_pre(x)
        t = torch.arange(x.shape[1], device=x.device)
        lag = (t[:, None] - t[None, :]).to(x.dtype)
        weights = torch.where(lag >= 0, (1 - self.decay) * self.decay ** lag.clamp(min=0), 0.0)
        echo = self.hook_echo(torch.einsum("ts,bsd->btd", weights, self.W(x)))
        return self.hook_resid_post(x + echo)


class EchoLM(SuiteModel):
    """embedding -> echo blocks -> ln_final -> unembedding."""

    arch = "echo"
    config_cls = EchoConfig
    tiny_config = MappingProxyType(dict(vocab_size=7, d_model=8, n_layers=2))

    @classmethod
    def block_hook_shapes(cls, cfg: EchoConfig, batch: int, pos: int) -> Shapes:
        return {"hook_echo": (batch, pos, cfg.d_model), "hook_resid_post": (batch, pos,
                                                                            cfg.d_model)}

    @classmethod
    def flops_per_token(cls, cfg: EchoConfig, n_params: int, length: int) -> float:
        # the weights' 6N, and each block's weighted sum over the positions before
        return 6.0 * n_params + 6.0 * cfg.n_layers * length * cfg.d_model

    def __init__(self, cfg: EchoConfig):
        super().__init__(cfg)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        self.blocks = nn.ModuleList([EchoBlock(cfg) for _ in range(cfg.n_layers)])
        self.ln_final = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.setup()
'''

TASK = '''
"""Toy task (tests/toy_paper.py): one letter repeated ``span`` times; the loss is on every
next token."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from seqprobe.flags import Config, bound
from tasks.base import IGNORE, LetterTask


@dataclass(frozen=True)
class EchoTaskConfig(Config):
    D: int = field(default=4, metadata=bound(2, 64, "the alphabet"))
    span: int = field(default=6, metadata=bound(2, 4096, "tokens per example"))


class EchoTask(LetterTask):
    name = "toy_echo"
    config_cls = EchoTaskConfig
    specials = ("PAD",)

    def example(self, g: torch.Generator):
        tokens = torch.randint(0, self.cfg.D, (1,), generator=g).repeat(self.cfg.span)
        targets = torch.full_like(tokens, IGNORE)
        targets[:-1] = tokens[1:]
        return tokens, targets

    def max_example_len(self) -> int:
        return self.cfg.span
'''

PROBE = '''
"""Toy probe (tests/toy_paper.py): how often the top next-token guess is the next token."""

from __future__ import annotations

import torch


def next_token_accuracy(model, tokens: torch.Tensor) -> float:
    with torch.no_grad():
        logits = model(tokens)  # [batch, pos, vocab]
    return float((logits[:, :-1].argmax(-1) == tokens[:, 1:]).float().mean())
'''

ZOO = '''
"""Toy paper's settings and recipes (tests/toy_paper.py): its level rows and one echo model,
at quick and medium."""

from __future__ import annotations

from collections.abc import Iterator

from analyses.zoo.recipe import Recipe
from models.levels import LevelTable

TRAIN = {"batch_size": 16, "lr": 3e-2, "warmup_steps": 1, "eval_every": 0, "eval_batches": 1,
         "eval_batch_size": 4}
TABLE = LevelTable.of({
    # a repeated letter is learnt in tens of steps: quick is a smoke test of the whole path
    ("quick", "toy_echo", "*"): {"task": {"D": 4, "span": 6},
                                 "train": {**TRAIN, "steps": 30}},
    ("quick", "toy_echo", "echo"): {"model": {"d_model": 8, "n_layers": 1}},
    ("medium", "toy_echo", "*"): {"task": {"D": 8, "span": 12},
                                  "train": {**TRAIN, "steps": 200}},
    ("medium", "toy_echo", "echo"): {"model": {"d_model": 16, "n_layers": 1, "decay": 0.8}},
})


def recipes() -> Iterator[Recipe]:
    yield Recipe("toy_echo/echo", "toy_echo", "echo", levels=("quick", "medium"), table=TABLE,
                 doc="toy: an echo model that repeats a letter")
'''

ANALYSIS = '''
"""Toy paper Fig. 1 (tests/toy_paper.py): an echo model repeats a letter, also in examples
twice as long as it was trained on.

``python -m analyses.toy_echo --train --level quick`` (the zoo's ``toy_echo/echo``)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyses.claims import Claim, Figure, Margin, Reading
from analyses.common import load_model, need, run_analysis
from figures.style import COLORS, new_figure
from probes.toy_echo import next_token_accuracy
from seqprobe.cli import add_fields
from seqprobe.flags import Config, bound
from tasks.base import make_generator
from tasks.registry import make_task

NAME = "toy_echo"
RECIPES = ("toy_echo/echo",)
THRESHOLD = 0.5
SCALE = {"quick": "an echo model on a letter repeated 6 times",
         "medium": "an echo model on a letter repeated 12 times"}


@dataclass(frozen=True)
class Settings(Config):
    """The analysis' own option, declared once: its flag --rows is made from the field."""

    rows: int = field(default=16, metadata=bound(1, 4096, "examples per accuracy",
                                                 help="examples each accuracy is taken on"))


def _compute(args, checkpoints):
    need(checkpoints)
    rows = []
    for c in checkpoints:
        model = load_model(c.path, archs=("echo",), tasks=("toy_echo",), device=args.device)
        g = make_generator(args.seed)
        longer = make_task("toy_echo", D=model.task.cfg.D, span=2 * model.task.cfg.span)
        n = args.rows
        rows.append({"label": c.label, "arch": model.arch,
                     "accuracy": next_token_accuracy(model, model.task.batch(n, g).tokens),
                     "longer": next_token_accuracy(model, longer.batch(n, g).tokens)})
    return {"seed": args.seed, "rows": args.rows, "models": rows}


def plot(result):
    fig, (ax,) = new_figure(1)
    rows = result["models"]
    ax.bar(range(len(rows)), [r["accuracy"] for r in rows],
           color=[COLORS.get(r["arch"]) for r in rows])
    ax.set(xticks=range(len(rows)), xticklabels=[r["label"] for r in rows],
           ylabel="next-token accuracy")
    return fig


def table(result):
    return [["model", "accuracy", "twice as long"],
            *([r["label"], r["accuracy"], r["longer"]] for r in result["models"])]


def _read(d: dict, key: str, what: str) -> Reading:
    r = d["models"][0]
    m = Margin(what, r[key], ">=", THRESHOLD)
    return Reading(f"{what} {r[key]:.3f} ({r['label']})", m.holds, m)


def claim_repeats(d: dict) -> Reading:
    """Toy Fig. 1: the model repeats the letter (next-token accuracy >= 0.5)."""
    return _read(d, "accuracy", "next-token accuracy")


def claim_longer(d: dict) -> Reading:
    """Toy Fig. 1: it repeats it twice as long as it was trained on (accuracy >= 0.5)."""
    return _read(d, "longer", "accuracy at twice the span")


FIGURE = Figure(
    "Toy: an echo repeats a letter", "Toy paper Fig. 1",
    (Claim(f"the model repeats the letter (accuracy >= {THRESHOLD})", claim_repeats),
     Claim(f"and at twice the trained span (accuracy >= {THRESHOLD})", claim_longer)),
    levels=("quick", "medium"), recipes=lambda level: list(RECIPES), scale=SCALE.get,
    paper_scale="the toy paper's echo model on letters repeated 100 times")


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE, add_arguments=lambda p: add_fields(p, Settings))


if __name__ == "__main__":
    raise SystemExit(main())
'''

TESTS = '''
"""The toy paper's claim readers, both ways, with their margins (tests/toy_paper.py)."""

import pytest

from analyses.toy_echo import claim_longer, claim_repeats


def _result(accuracy, longer):
    return {"models": [{"label": "toy_echo/echo", "accuracy": accuracy, "longer": longer}]}


def test_the_readers_verdicts_and_margins():
    for reader, key in ((claim_repeats, 0), (claim_longer, 1)):
        good, bad = [0.5, 0.5], [0.5, 0.5]
        good[key], bad[key] = 0.9, 0.2
        read = reader(_result(*good))
        assert read[1] is True and read.margin.distance == pytest.approx(0.4)
        read = reader(_result(*bad))
        assert read[1] is False and read.margin.distance == pytest.approx(-0.3)
'''

# path in the repository -> its text, in the order docs/adding-a-paper.md writes them
FILES: dict[str, str] = {
    f"models/{ARCH}.py": MODEL,
    f"tasks/{NAME}.py": TASK,
    f"probes/{NAME}.py": PROBE,
    f"analyses/zoo/{NAME}.py": ZOO,
    f"analyses/{NAME}.py": ANALYSIS,
    f"tests/test_{NAME}.py": TESTS,
}
REGISTRY_FILE = "seqprobe/registry.toml"
# table -> the toy's row in it
ROWS: dict[str, str] = {
    "archs": f'{ARCH} = "models.{ARCH}:EchoLM"',
    "tasks": f'{NAME} = "tasks.{NAME}:EchoTask"',
    "probes": f'{NAME} = "probes.{NAME}"',
    "papers": f'{NAME} = "analyses.zoo.{NAME}"',
    "analyses": f'{NAME} = "analyses.{NAME}"',  # first: the reproduce plan's order
}


def register(text: str) -> str:
    """``seqprobe/registry.toml``'s text with the toy's row first in each of its tables."""
    for table, row in ROWS.items():
        head = re.search(rf"^\[{table}\]\n", text, re.M)
        assert head, f"no [{table}] table in {REGISTRY_FILE}"
        text = f"{text[:head.end()]}{row}\n{text[head.end():]}"
    return text


def sources() -> dict[str, str]:
    """``FILES`` as file contents (dedented, one trailing newline)."""
    return {path: textwrap.dedent(text).lstrip() for path, text in FILES.items()}
