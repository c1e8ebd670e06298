"""Checkpoint files: one ``.pt`` payload, loadable with ``torch.load(path, weights_only=True)``.

Split by job, each module importing only those listed before it:

- :mod:`~models.checkpoint.paths`: path checks (too long, not a regular file, not writable;
  a HuggingFace source rather than a checkpoint).
- :mod:`~models.checkpoint.untrusted`: what a hostile file could do (pickled code, lying zip
  directories, tensors that claim more than they store) and the bounds on what a file may
  make this process allocate.
- :mod:`~models.checkpoint.schema`: the payload layout (DESIGN.md), its digests, validation
  and the translation of older formats.
- :mod:`~models.checkpoint.io`: saving (atomic, through :mod:`seqprobe.atomic`) and reading files,
  the overwrite guard and the run-long writer lock.
- :mod:`~models.checkpoint.rebuild`: the model of a payload, sized before it is allocated.

Words used apart: the *checkpoint file* at ``ckpt_path``, the *payload* dict it holds; a zoo
entry and a cache path are :mod:`analyses.zoo`'s and :mod:`models.train.cache`'s. Each name is
imported from the module that defines it (``from models.checkpoint.io import
read_checkpoint``); this file imports nothing.
"""
