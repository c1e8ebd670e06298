"""Sweeps as ensembles: several runs of one architecture trained as one batched model.

A sweep's runs (seeds, learning rates, weight decays of one model) are tiny next to a GPU: a
step of one of them is bound by kernel launches and keeps the card a few percent busy. An
ensemble trains them together, its members sharing the launches (on a CPU, where such a step is
bound by its arithmetic, it is no faster: :func:`pays_off`). Each member is a
:class:`~models.train.loop.Trainee`, exactly the solo run of its :class:`RunConfig`: its own
initialisation (its seed), data stream, AdamW with its learning rate, weight decay and
schedule, gradient clipping, evaluations, callbacks, early stop (``stop_at``), checkpoints and
``--resume``. Only the forward and backward pass are shared: each step the members' weights are
stacked on a leading member axis and one ``torch.func.vmap`` of the model's forward runs every
member's batch at once (:func:`fused_backward`). The sum of the members' losses is
backpropagated, and as the members share no weight, each member's gradient is its own loss's
gradient, the one its solo run computes (up to float rounding: a batched matmul adds in another
order).

A member that stops (``stop_at``, its last step, a diverged loss) leaves the stack; the rest
go on. Members whose batches differ in shape at a step (tasks of other lengths) run as one
vmap per shape. Each member writes its own checkpoint, the one its solo run writes, so the
zoo serves it under its recipe's cache key.

Glossary:
    M                the members still training at this step
    params[name]     the members' parameter ``name`` stacked: [M, *shape]
    tokens, targets  the members' batches stacked: [M, batch, pos]
"""

from __future__ import annotations

import copy
import json
import random
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.func import functional_call, vmap

from models.checkpoint.paths import check_writable
from models.checkpoint.write import exclusive_writer
from models.train.build import run_size, validate_run_config
from models.train.callbacks import Callback
from models.train.evaluation import EvaluationStopped, Evaluator, evaluate
from models.train.loop import (
    Trainee,
    TrainingDiverged,
    TrainingInterrupted,
    _eval_due,
    _StopSignals,
)
from models.train.loss import nll
from models.train.rng import global_rngs_kept
from models.train.runconfig import RunConfig
from seqprobe.config import check
from seqprobe.device import resolve_device
from seqprobe.errors import SaveError
from seqprobe.memory import check_fits, human_bytes
from tasks.registry import make_task

__all__ = ["MemberFailed", "ensemble_key", "fused_backward", "group_runs", "pays_off",
           "train_ensemble"]


@dataclass(frozen=True)
class MemberFailed:
    """A member's run ended with an error (a diverged loss, say); the others went on."""

    error: str


def ensemble_key(run_config: RunConfig) -> str | None:
    """Runs with one key train as one ensemble: the same architecture and model config (one
    forward, vmapped) at the same precision. None: the run trains alone, because its setting
    is one an ensemble does not run as it does (micro-batches, recomputed blocks: they trade
    memory for the same numbers, and a member runs its whole batch at once)."""
    cfg = run_config.train
    if cfg.checkpoint_blocks or (cfg.micro_batch and cfg.micro_batch < cfg.batch_size):
        return None
    model = json.dumps(run_config.model_dict, sort_keys=True, default=str)
    return f"{run_config.arch}|{model}|{cfg.precision}|{cfg.device_type}"


def pays_off(run_config: RunConfig) -> bool:
    """Whether an ensemble trains ``run_config`` faster than one run after another (the
    ``--ensembles auto`` rule): on a GPU, where a small model's step is bound by kernel
    launches, which an ensemble's members share. Not on a CPU: there a step is bound by its
    arithmetic, which an ensemble does not share (bench/results.json ``ensemble``: the same
    work or more), so CPU cores run a sweep's runs side by side, each exactly its solo run."""
    return run_config.train.device_type == "cuda"


def group_runs(run_configs: Sequence[RunConfig], max_members: int = 32,
               only_if_it_pays: bool = False) -> list[list[int]]:
    """Indices of ``run_configs`` grouped into ensembles (:func:`ensemble_key`; at most
    ``max_members`` each, in the order given); a run that trains alone is a group of one.
    ``only_if_it_pays``: a run :func:`pays_off` says nothing for trains alone too."""
    groups: dict[str, list[list[int]]] = {}
    out: list[list[int]] = []
    for i, run_config in enumerate(run_configs):
        key = ensemble_key(run_config) if not only_if_it_pays or pays_off(run_config) else None
        if key is None:
            out.append([i])
            continue
        open_ = groups.setdefault(key, [])
        if not open_ or len(open_[-1]) >= max_members:
            open_.append([])
            out.append(open_[-1])
        open_[-1].append(i)
    return out


def _template(model: torch.nn.Module) -> torch.nn.Module:
    """The module the members' stacked weights run through: a copy of a member's model on a
    path that vmap batches: the class's ``ensemble_scan`` (e.g. the transformer's plain
    attention, as PyTorch has no batching rule for CPU SDPA and would loop over members); on
    CUDA the chunked scan of a model that could take mamba-ssm's kernels, which have none."""
    template = copy.deepcopy(model)
    scan = getattr(template, "ensemble_scan", None)
    if (scan is None and "kernel" in getattr(template, "scans", ())
            and next(template.parameters()).is_cuda):
        scan = "chunked"
    if scan is not None:
        template.set_scan(scan)
    return template


def fused_backward(members: Sequence[Trainee], batches: Sequence[Any],
                   template: torch.nn.Module) -> list[float]:
    """One forward and backward of every member's batch, the members' weights stacked on a
    leading axis and the model vmapped over it; gradients land in each member's own
    parameters' ``.grad`` (the sum of the losses: members share no weight). Returns each
    member's mean training loss."""
    values = [0.0] * len(members)
    by_shape: dict[tuple, list[int]] = {}
    for i, b in enumerate(batches):
        by_shape.setdefault((tuple(b.tokens.shape), tuple(b.targets.shape)), []).append(i)
    names = [n for n, _ in template.named_parameters()]
    buffer_names = [n for n, _ in template.named_buffers()]

    def forward(params, buffers, tokens):
        return functional_call(template, (params, buffers), (tokens,),
                               {"return_type": "log_probs"})

    for idx in by_shape.values():
        group = [members[i] for i in idx]
        own = [dict(m.model.named_parameters()) for m in group]
        bufs = [dict(m.model.named_buffers()) for m in group]
        params = {n: torch.stack([p[n] for p in own]) for n in names}  # [M, *shape]
        buffers = {n: torch.stack([b[n] for b in bufs]) for n in buffer_names}
        tokens = torch.stack([batches[i].tokens for i in idx])  # [M, batch, pos]
        precision = group[0].cfg.precision
        dev = group[0].run.device
        with (torch.autocast(dev.type, dtype=torch.bfloat16) if precision == "bf16"
              else nullcontext()):
            logp = vmap(forward)(params, buffers, tokens)  # [M, batch, pos, vocab]
        losses = [nll(logp[j], batches[i].targets) for j, i in enumerate(idx)]
        torch.stack(losses).sum().backward()
        for j, i in enumerate(idx):
            values[i] = losses[j].item()
    return values


def _check_ensemble(run_configs: Sequence[RunConfig], dev: torch.device) -> None:
    """One line before any work: the runs form one ensemble and fit in memory together."""
    check(len(run_configs) >= 1, "an ensemble needs at least one run")
    keys = {ensemble_key(s) for s in run_configs}
    check(len(keys) == 1 and None not in keys,
          "these runs cannot train as one ensemble (another architecture or model config, or a "
          "setting an ensemble does not run: micro_batch, checkpoint_blocks); "
          "models.train.ensemble.group_runs groups them")
    need = 0
    for s in run_configs:
        need += run_size(s, make_task(s.task_name, s.task_dict))[1]
    if dev.type == "cpu":
        check_fits(need, f"an ensemble of {len(run_configs)} {run_configs[0].arch} runs",
                   "train fewer members at once")
    elif dev.type == "cuda":
        free = torch.cuda.mem_get_info(dev)[0]
        check(need <= free,
              f"an ensemble of {len(run_configs)} {run_configs[0].arch} runs needs about "
              f"{human_bytes(need)} of GPU memory, more than the {human_bytes(free)} free; "
              "train fewer members at once")


def train_ensemble(run_configs: Sequence[RunConfig], outs: Sequence[str | Path | None],
                   device: str = "auto", resumes: Sequence[str | Path | None] | None = None,
                   progress: bool = True, callbacks: Sequence[Sequence[Callback]] | None = None,
                   evaluator: Evaluator = evaluate) -> list[dict[str, Any] | MemberFailed]:
    """Train ``run_configs`` as one ensemble; member ``i`` writes ``outs[i]`` (None: nothing) and
    continues ``resumes[i]`` where given. Returns each member's final checkpoint dict (what
    :func:`~models.train.loop.train` returns for its solo run), or a :class:`MemberFailed`
    for a member whose loss diverged (nothing saved for it, as solo). Ctrl-C or SIGTERM saves
    every member still training and raises :class:`TrainingInterrupted`."""
    n = len(run_configs)
    outs = list(outs)
    resumes = list(resumes) if resumes is not None else [None] * n
    callbacks = list(callbacks) if callbacks is not None else [()] * n
    check(len(outs) == n and len(resumes) == n and len(callbacks) == n,
          "train_ensemble: one output, resume and callback list per run")
    for s in run_configs:
        validate_run_config(s)
    dev = resolve_device(device)
    run_configs = [s.resolved(dev) for s in run_configs]
    _check_ensemble(run_configs, dev)
    paths = [check_writable(o) if o is not None else None for o in outs]
    check(len({p for p in paths if p is not None}) == sum(p is not None for p in paths),
          "train_ensemble: two members would write the same file")
    locks = [exclusive_writer(p) if p is not None else nullcontext() for p in paths]
    entered = []
    try:
        for lock in locks:
            lock.__enter__()
            entered.append(lock)
        return _train_members(run_configs, paths, dev, resumes, progress, callbacks, evaluator)
    finally:
        for lock in reversed(entered):
            lock.__exit__(None, None, None)


def _train_members(run_configs, paths, dev, resumes, progress, callbacks, evaluator):
    members, rngs = [], []
    for i, run_config in enumerate(run_configs):
        # each member's global RNGs as its solo run leaves them after its init, put in place
        # whenever that member runs code of its own (evaluations, saves): its checkpoints'
        # RNG state is its solo run's
        with global_rngs_kept():
            members.append(Trainee(run_config, paths[i], dev, resumes[i], progress, callbacks[i],
                                   evaluator, position=i if progress else None))
            rngs.append(_MemberRngs())
    runs = [r.hash() for r in run_configs]  # each member's checkpoint names the ensemble
    for i, m in enumerate(members):
        m.writer.ensemble = {"member": i, "runs": runs}
    template = _template(members[0].model)
    for m in members:
        if m.cfg.compile:  # its records say so, as a solo run's whose compile fell back
            m.compiled = _RanEager()
    results: list[dict[str, Any] | MemberFailed | None] = [None] * len(members)
    try:
        with _StopSignals() as signals:
            quiet = _NoInterrupt(signals)  # the ensemble, not a member, acts on a signal
            stopped_in_eval = -1
            try:
                for i, m in enumerate(members):
                    stopped_in_eval = i
                    with rngs[i]:
                        m.start(quiet)
                active = [i for i, m in enumerate(members) if m.active]
                while active:
                    batches = [members[i].begin_step() for i in active]
                    values = fused_backward([members[i] for i in active], batches, template)
                    stepped = []
                    for i, batch, value in zip(active, batches, values, strict=True):
                        try:
                            members[i].end_step(value, batch)
                            stepped.append(i)
                        except TrainingDiverged as e:
                            results[i] = MemberFailed(str(e))
                            member = run_configs[i]
                            print(f"ensemble member {i} ({member.arch}, seed "
                                  f"{member.train.seed}, lr {member.train.lr:g}): {e}",
                                  file=sys.stderr)
                    for k, i in enumerate(stepped):
                        stopped_in_eval = i
                        try:
                            with rngs[i]:
                                members[i].after_step(quiet)
                        except EvaluationStopped:
                            # the members after it stepped but have not evaluated: their
                            # evaluations are pending too (--resume runs them first)
                            for j in stepped[k + 1:]:
                                if _eval_due(members[j].cfg, members[j].run.step):
                                    members[j].run.eval_pending = {"loss": members[j].run.loss}
                            raise
                    if signals.signal_name:
                        raise TrainingInterrupted(signals.signal_name)
                    active = [i for i in active if results[i] is None and members[i].active]
            except (EvaluationStopped, TrainingInterrupted) as e:
                during = " during its evaluation" if isinstance(e, EvaluationStopped) else ""
                for i, m in enumerate(members):
                    if results[i] is not None:
                        continue
                    with rngs[i]:
                        if m.active or m.run.eval_pending:
                            try:
                                m.interrupted(signals.signal_name,
                                              during if i == stopped_in_eval else "")
                            except SaveError as err:  # the others are still saved
                                print(f"ensemble member {i}: {err}", file=sys.stderr)
                        else:  # it had finished: its final checkpoint
                            results[i] = _save_member(m, i, run_configs[i])
                raise TrainingInterrupted("ensemble interrupted") from None
            for i, m in enumerate(members):
                if results[i] is None:
                    with rngs[i]:
                        results[i] = _save_member(m, i, run_configs[i])
            return results
    finally:
        for m in members:
            m.bar.close()


def _save_member(m: Trainee, i: int, run_config: RunConfig) -> dict[str, Any] | MemberFailed:
    """A finished member's final checkpoint; a member whose file the disk refuses is a
    :class:`MemberFailed` saying where its state went instead (the writer's rescue), and the
    other members are still saved."""
    try:
        return m.writer.save(final=True)
    except SaveError as e:
        print(f"ensemble member {i} ({run_config.arch}, seed {run_config.train.seed}, lr "
              f"{run_config.train.lr:g}): {e}", file=sys.stderr)
        return MemberFailed(str(e))


class _RanEager:
    """What an evaluation record reads of a compiled forward that ran eager."""

    fallback = "ensemble member: the vmapped forward runs eager, not torch.compile'd"


class _NoInterrupt:
    """The stop signals as a member reads them, without their name: a member's
    ``after_step`` does not interrupt itself (the ensemble stops all its members at the same
    step); an evaluation still sees the stop flag and gives up between its batches."""

    signal_name = ""
    signum = 0

    def __init__(self, signals: _StopSignals):
        self._signals = signals

    @property
    def stop(self) -> bool:
        return self._signals.stop


class _MemberRngs:
    """A member's global RNGs (torch, numpy, python), entered whenever the member runs code
    of its own: what that code draws is the member's, and the caller's are put back."""

    def __init__(self):
        self.state = _global_rngs()  # taken right after the member's init

    def __enter__(self):
        self.saved = _global_rngs()
        _set_global_rngs(self.state)

    def __exit__(self, *exc):
        self.state = _global_rngs()
        _set_global_rngs(self.saved)


def _global_rngs() -> tuple:
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def _set_global_rngs(state: tuple) -> None:
    torch.set_rng_state(state[0])
    np.random.set_state(state[1])
    random.setstate(state[2])
