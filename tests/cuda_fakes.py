"""The suite's fake GPU for tests on a machine without one: CUDA made to look available (as
NVML would answer, without initialising it), the card's facts as a child interpreter would
report them (seqprobe.device.gpu_facts), and whether this process has initialised CUDA."""

from __future__ import annotations

import torch

import seqprobe.device


def fake_gpu(monkeypatch, *, bf16: bool = True, touched: bool = False,
             name: str = "NVIDIA H200", memory: int = 141 << 30) -> list[str]:
    """Make this process see one CUDA device. Returns a list that records every call that
    would initialise CUDA in this process (torch's lazy init): a planning process must
    leave it empty."""
    inits: list[str] = []
    facts = {"name": name, "total_memory": memory, "capability": [9, 0], "bf16": bf16}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: touched)
    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda: inits.append("_lazy_init"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    monkeypatch.setattr(seqprobe.device, "_facts_from_child", lambda index: dict(facts))
    return inits
