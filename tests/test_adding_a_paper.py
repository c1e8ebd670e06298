"""The docs' "Adding a paper" exercise (docs/adding-a-paper.md), done for real with a toy paper.

The toy paper's files are written where the page says (``tasks/toy_repeat.py``,
``probes/toy_repeat.py``, ``analyses/toy_repeat.py``, ``analyses/zoo/toy_repeat.py``), but
under ``tmp_path``: those folders are appended to the packages' search paths. The task and the
zoo's recipes are then *found* (tasks.registry.TASKS, analyses.zoo.recipes.papers), as a new
file in the real folders would be; the one registration, the name in ``PLAN``, is
monkeypatched in as the edit to analyses/reproduce/plan.py would make it. The architecture is
an existing one (``lstm``): a new one is one file, models/NAME.py, found the same way
(models.registry.ARCHS; tests/test_model_contract.py holds it to the contract).

Then the plan machinery runs on it: ``build_jobs`` makes its training job and its analysis
job, both run in this process from the exact argv the plan built (60 training steps of a
tiny LSTM), the analysis writes its JSON, and the index reads its claim back with its ``Margin``.
The hand-kept-list checks pass with the toy registered and name the fix when it is not.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

import analyses
import probes
import tasks
from analyses import zoo
from analyses.reproduce import cli as reproduce_cli
from analyses.reproduce import plan
from analyses.reproduce.index import index_outcome, write_index
from analyses.zoo.recipes import build_recipes
from tasks.registry import TASKS
from tests.test_hand_kept_lists import analyses_with_figure, plan_problems

NAME = "toy_repeat"
RECIPE = f"{NAME}/lstm"

TASK = '''
"""Toy task: one letter repeated ``length`` times; the loss is on every next token."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from seqprobe.config import check
from seqprobe.flags import bound
from tasks.base import IGNORE
from tasks.registry import LetterTask


@dataclass(frozen=True)
class RepeatConfig:
    # each number carries its bound (its --task.FIELD flag and run records are checked by it)
    D: int = field(default=3, metadata=bound(2, 64, "the alphabet"))
    length: int = field(default=6, metadata=bound(2, 4096, "tokens per sequence"))

    def __post_init__(self):
        check(self.D >= 2, f"D must be >= 2, got {self.D}")
        check(self.length >= 2, f"length must be >= 2, got {self.length}")


class RepeatTask(LetterTask):
    name = "toy_repeat"
    config_cls = RepeatConfig
    specials = ("PAD",)

    def example(self, g: torch.Generator):
        x = torch.randint(0, self.cfg.D, (1,), generator=g)
        tokens = x.repeat(self.cfg.length)
        targets = torch.full_like(tokens, IGNORE)
        targets[:-1] = tokens[1:]
        return tokens, targets

    def max_example_len(self) -> int:
        return self.cfg.length
'''

PROBE = '''
"""Toy probe: how often the model's top next-token guess is the repeated letter."""

from __future__ import annotations

import torch


def repeat_accuracy(model, tokens: torch.Tensor) -> float:
    with torch.no_grad():
        logits = model(tokens)  # [batch, pos, vocab]
    return float((logits[:, :-1].argmax(-1) == tokens[:, 1:]).float().mean())
'''

ANALYSIS = '''
"""Toy paper Fig. 1: a model learns to repeat a letter.

``python -m analyses.toy_repeat CKPT`` (or ``--train quick``: the zoo's ``toy_repeat/lstm``)
"""

from __future__ import annotations

from analyses.claims import Claim, Figure, Margin, Reading
from analyses.common import load_model, need, run_analysis
from figures.style import COLORS, new_figure
from probes.toy_repeat import repeat_accuracy
from tasks.base import make_generator

NAME = "toy_repeat"
RECIPES = ("toy_repeat/lstm",)
THRESHOLD = 0.5


def _compute(args, checkpoints):
    need(checkpoints)
    rows = []
    for c in checkpoints:
        model = load_model(c.path, archs=("lstm",), tasks=("toy_repeat",), device=args.device)
        batch = model.task.batch(16, make_generator(args.seed))
        rows.append({"label": c.label, "arch": model.arch,
                     "accuracy": repeat_accuracy(model, batch.tokens)})
    return {"seed": args.seed, "models": rows}


def plot(result):
    fig, (ax,) = new_figure(1)
    rows = result["models"]
    ax.bar(range(len(rows)), [r["accuracy"] for r in rows],
           color=[COLORS.get(r["arch"]) for r in rows])
    ax.set(xticks=range(len(rows)), xticklabels=[r["label"] for r in rows],
           ylabel="next-token accuracy")
    return fig


def table(result):
    return [["model", "accuracy"], *([r["label"], r["accuracy"]] for r in result["models"])]


def claim_repeat(d: dict) -> Reading:
    """Toy paper Fig. 1: the model repeats the letter (accuracy >= 0.5)."""
    r = d["models"][0]
    m = Margin("next-token accuracy", r["accuracy"], ">=", THRESHOLD)
    return Reading(f"accuracy {r['accuracy']:.3f} ({r['label']})", m.holds, m)


FIGURE = Figure("Toy: repeating a letter", "Toy paper Fig. 1",
                (Claim(f"the model repeats the letter (accuracy >= {THRESHOLD})", claim_repeat),),
                recipes=lambda preset: list(RECIPES))


def main(argv=None) -> int:
    return run_analysis(NAME, __doc__, argv, compute=_compute, plot=plot, table=table,
                        figure=FIGURE)


if __name__ == "__main__":
    raise SystemExit(main())
'''

# the paper's zoo module, analyses/zoo/toy_repeat.py: a tiny LSTM, 60 steps, which
# learns to repeat the letter (deterministic: the seeds are the recipe's)
ZOO = f'''
"""Toy paper's recipes."""

from collections.abc import Iterator

from analyses.zoo.recipe import Recipe


def recipes() -> Iterator[Recipe]:
    yield Recipe("{RECIPE}", "{NAME}", "lstm",
                 {{"model": {{"d_model": 8, "n_layers": 1}},
                  "train": {{"steps": 60, "batch_size": 16, "lr": 3e-2, "warmup_steps": 1,
                            "eval_every": 0, "eval_batches": 1, "eval_batch_size": 4}}}},
                 doc="toy: an LSTM that repeats a letter")
'''


@pytest.fixture
def toy_paper(tmp_path, monkeypatch):
    """The toy paper's three files under tmp_path, importable as tasks.toy_repeat,
    probes.toy_repeat and analyses.toy_repeat; nothing registered yet."""
    for package, text in ((tasks, TASK), (probes, PROBE), (analyses, ANALYSIS), (zoo, ZOO)):
        folder = tmp_path / "tree" / package.__name__.replace(".", "/") / "_toy"
        folder.mkdir(parents=True)
        (folder / f"{NAME}.py").write_text(textwrap.dedent(text).lstrip())
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    monkeypatch.syspath_prepend(str(tmp_path / "tree"))
    yield tmp_path
    for package in (tasks, probes, analyses, zoo):
        sys.modules.pop(f"{package.__name__}.{NAME}", None)
        if hasattr(package, NAME):
            delattr(package, NAME)


def register(monkeypatch) -> None:
    """What the page's steps make: the task and the recipes found in their folders (the
    discovered tables are rebuilt, as a fresh process would build them), the name in PLAN."""
    monkeypatch.setattr(TASKS, "_table", None)  # found again, with the new file
    assert TASKS[NAME] == f"tasks.{NAME}:RepeatTask"
    found = build_recipes()
    assert set(found) - set(zoo.RECIPES) == {RECIPE}  # the zoo module's recipe, found
    monkeypatch.setitem(zoo.RECIPES, RECIPE, found[RECIPE])
    monkeypatch.setattr(plan, "PLAN", (*plan.PLAN, NAME))  # analyses/reproduce/plan.py
    # cli.py imported the name PLAN: the edit to plan.py reaches it, a monkeypatch must too
    monkeypatch.setattr(reproduce_cli, "PLAN", plan.PLAN)


def test_a_forgotten_registration_is_named_by_the_hand_kept_list_checks(toy_paper):
    found = analyses_with_figure()
    assert NAME in found  # discovered from its module-level FIGURE alone
    assert (f"analyses.{NAME} declares a FIGURE but is not planned: add {NAME} to PLAN in "
            "analyses/reproduce/plan.py") in "\n".join(plan_problems(found))


def test_a_toy_paper_runs_through_the_plan_to_the_index(toy_paper, monkeypatch, capsys):
    register(monkeypatch)
    found = analyses_with_figure()
    assert plan_problems(found) == []

    # the plan lists it at quick
    out, cache = toy_paper / "out", toy_paper / "ck"
    assert reproduce_cli.main(["--quick", "--only", NAME, "--list", "--out", str(out),
                               "--cache-dir", str(cache)]) == 0
    assert NAME in capsys.readouterr().out

    # its jobs: the recipe's training, then the analysis after it
    jobs = plan.build_jobs([NAME], "quick", out, cache)
    assert [j.name for j in jobs] == [plan.TRAIN + RECIPE, NAME]
    train, analysis = jobs
    assert analysis.after == (train.name,) and analysis.figure is sys.modules[
        f"analyses.{NAME}"].FIGURE
    assert train.argv[1:5] == ("-m", "analyses.zoo", "train", RECIPE)
    assert analysis.argv[1:3] == ("-m", f"analyses.{NAME}") and "--train" in analysis.argv
    assert analysis.missing(out) == [f"{NAME}.json"]

    # each job run here, from the argv the plan built (python -m MODULE ARGS...)
    assert zoo.main(list(train.argv[3:])) == 0
    assert zoo.status(RECIPE, "quick", cache) == "cached"
    assert plan.build_jobs([NAME], "quick", out, cache)[0].name == NAME  # nothing left to train
    module = sys.modules[f"analyses.{NAME}"]
    assert module.main(list(analysis.argv[3:])) == 0
    assert analysis.missing(out) == []
    result = json.loads((out / f"{NAME}.json").read_text())
    accuracy = result["models"][0]["accuracy"]
    assert result["models"][0]["label"] == RECIPE and 0.0 <= accuracy <= 1.0

    # the index reads the claim from that JSON, with its margin
    outcome = index_outcome(analysis, out, {})
    assert outcome.ok
    [(paper, measured, verdict)] = outcome.claims
    [margin] = outcome.margins
    assert paper.startswith("the model repeats the letter") and RECIPE in measured
    assert margin is not None and margin.value == pytest.approx(accuracy)
    assert verdict is True and accuracy >= 0.5 and margin.threshold == 0.5  # it learnt it
    assert margin.distance == pytest.approx(accuracy - 0.5)
    write_index([outcome], out, "quick")
    md = (out / "index.md").read_text()
    assert "## Toy: repeating a letter" in md and "next-token accuracy" in md
    assert f"python -m analyses.{NAME}" in md and "| holds |" in md
