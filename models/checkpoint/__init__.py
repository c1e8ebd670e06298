"""Checkpoint files: one ``.pt`` payload, loadable with ``torch.load(path, weights_only=True)``.

Split by job, each module importing only those listed before it:

- :mod:`~models.checkpoint.paths`: path checks (too long, not a regular file, not writable;
  a HuggingFace source rather than a checkpoint).
- :mod:`~models.checkpoint.untrusted`: what a hostile file could do (pickled code, lying zip
  directories, tensors that claim more than they store) and the bounds on what a file may
  make this process allocate.
- :mod:`~models.checkpoint.layout`: the payload layout (DESIGN.md), the one place a payload
  is assembled, and its digests.
- :mod:`~models.checkpoint.write`: saving (atomic, through :mod:`seqprobe.atomic`) and the
  run-long writer lock.
- :mod:`~models.checkpoint.schema`: validation against the registries of architectures and
  tasks, and the translation of older formats.
- :mod:`~models.checkpoint.io`: reading files and the overwrite guard.
- :mod:`~models.checkpoint.rebuild`: the model of a payload, sized before it is allocated.

The writing side (layout, write) knows no architecture or task: the model base class saves
through it, and the registries import the models, so the reading side (schema, io, rebuild),
which needs the registries, sits above them and the base class never imports it.

Words used apart: the *checkpoint file* at ``ckpt_path``, the *payload* dict it holds; a zoo
entry and a cache path are :mod:`analyses.zoo`'s and :mod:`models.train.cache`'s. Each name is
imported from the module that defines it (``from models.checkpoint.io import
read_checkpoint``); this file imports nothing.
"""
