"""Issue 55's smaller items, each one line or the right answer: a space in copy-task text is
refused (not dropped); effective attention of a layer the model does not have is one line."""

from __future__ import annotations

import pytest
import torch

from models.constructions import build_hash_copy_transformer
from probes.effective_attention import effective_attention, hook_names
from seqprobe.errors import InputError


def test_a_space_in_copy_text_is_one_line_not_dropped():
    m = build_hash_copy_transformer(2, 26)
    m.set_task("copy", {"D": 26})
    with pytest.raises(InputError, match=r"whitespace \(at character 5\).*'helloworld'") as e:
        m.to_tokens("hello world")
    assert "\n" not in str(e.value)
    assert m.to_tokens(" hello ").tolist() == m.to_tokens("hello").tolist()  # padding only


def test_effective_attention_of_a_layer_out_of_range_is_one_line(tiny_model):
    m = tiny_model("mamba2", n_layers=1)
    tokens = torch.randint(0, m.cfg.vocab_size, (1, 6))
    _, cache = m.run_with_cache(tokens, names_filter=lambda n: n in hook_names([0]))
    with pytest.raises(InputError, match=r"layer 1 is out of range: this model has 1 layer "
                                         r"\(0..0\)") as e:
        effective_attention(m, cache, 1)
    assert "\n" not in str(e.value)
    torch.testing.assert_close(effective_attention(m, cache, -1), effective_attention(m, cache, 0))
