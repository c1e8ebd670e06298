"""analyses.pretrained_copy (copy paper §4, Fig. 1c and Fig. 7) and its prompts
(tasks/prompts.py): the paper's prompt formats, the greedy verdict against plain greedy
decoding, the CLI on two tiny HuggingFace models saved to disk, bad input, the claim readers."""

from tests import ROOT_DIR
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
from tokenizers.models import BPE
from transformers import PreTrainedTokenizerFast

from analyses import pretrained_copy as pc
from seqprobe.errors import InputError
from tasks.base import make_generator
from tasks.phonebook import names
from tasks.prompts import (
    COPY_END,
    PHONEBOOK_END,
    copy_prompt,
    generated_text,
    phonebook_prompt,
    score_continuation,
    shuffle_words,
    text_window,
)
from tests.hf_fixtures import char_tokenizer, tiny_hf_model

ROOT = ROOT_DIR
LINE = re.compile(r"^([A-Za-z]+ [A-Za-z]+): (\d{3}-\d{3}-\d{4})$")


# ---------------------------------------------------------------------------- prompt formats
def test_phonebook_prompt_is_the_papers_format():
    prompt, answer = phonebook_prompt(6, make_generator(3))
    book, shots, query = prompt.split("\n\n")
    book, shots = book.split("\n"), shots.split("\n")
    assert len(book) == 6 and len(shots) == 2
    parsed = dict(LINE.match(line).groups() for line in book)  # every line "First Last: num"
    assert len(parsed) == 6  # distinct names
    first, last = names()
    assert all(n.split()[0] in first and n.split()[1] in last for n in parsed)
    assert all(s in book for s in shots) and len(set(shots)) == 2
    assert query.endswith(":") and query[:-1] in parsed
    assert query[:-1] not in {s.split(":")[0] for s in shots}  # the query is a third entry
    assert answer == parsed[query[:-1]]
    assert prompt == "\n".join(book) + "\n\n" + "\n".join(shots) + "\n\n" + query
    assert phonebook_prompt(6, make_generator(3)) == (prompt, answer)  # seeded
    with pytest.raises(InputError, match="entries"):
        phonebook_prompt(2, make_generator(0))


def test_copy_prompt_is_the_papers_format():
    assert copy_prompt("The old  house\nstood near a river.") == (
        "The old house stood near a river.\n\nThe old house stood near a river.\n\nThe",
        "old house stood near a river.")
    assert copy_prompt("single") == ("single\n\nsingle\n\nsingle", "")
    with pytest.raises(InputError, match="empty"):
        copy_prompt(" \n ")


def test_text_windows_generated_text_and_shuffle():
    text = generated_text(200, make_generator(0))
    assert len(text.split()) >= 200 and text == generated_text(200, make_generator(0))
    assert text[0].isupper() and text.endswith(".")
    tok = char_tokenizer()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    w = text_window(ids, 30, tok.decode, make_generator(1))
    assert len(w) <= 30 and w in text  # characters are tokens here; whitespace normalised
    assert w == text_window(ids, 30, tok.decode, make_generator(1))
    with pytest.raises(InputError, match="fewer than"):
        text_window(ids[:5], 6, tok.decode, make_generator(1))
    s = shuffle_words("a b c d e f g h", make_generator(2))
    assert sorted(s.split()) == list("abcdefgh") and s != "a b c d e f g h"


@pytest.mark.parametrize("continuation,end,final,verdict", [
    (" 609-323-7777\nJohn", PHONEBOOK_END, False, True),  # the first line, stripped
    ("609-323-7777  \n", PHONEBOOK_END, False, True),
    (" 609-32", PHONEBOOK_END, False, None),  # can still become the answer
    (" 609-323-7777 ", PHONEBOOK_END, False, None),  # trailing space, the line not ended
    (" 609-323-7777 x", PHONEBOOK_END, False, False),
    (" 608", PHONEBOOK_END, False, False),
    ("\n609-323-7777", PHONEBOOK_END, False, False),  # an empty first line
    (" 609-323-7777", PHONEBOOK_END, True, True),  # generation stopped (EOS / budget)
    (" 609-323", PHONEBOOK_END, True, False),
    (" 609-\ufffd", PHONEBOOK_END, False, None),  # a byte token inside a character
])
def test_score_continuation_phonebook(continuation, end, final, verdict):
    assert score_continuation(continuation, "609-323-7777", end, final) is verdict


@pytest.mark.parametrize("continuation,final,verdict", [
    (" old house\nstood.\n\nThe", False, True),  # newlines read as spaces, cut at blank line
    (" old house stood.\n", False, None),  # one newline: the blank line may still come
    (" old house stood. The", False, False),
    (" old house", True, False),
])
def test_score_continuation_copy(continuation, final, verdict):
    assert score_continuation(continuation, "old house stood.", COPY_END, final) is verdict


# ---------------------------------------------------------------------------- greedy verdicts
def bpe_tokenizer():
    """A byte-level BPE tokenizer (GPT-NeoX's kind: Pythia's and Mamba's) trained on the
    prompts' kind of text, so tokens span several characters and spaces ("Ġ2", "Ċ")."""
    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [generated_text(2000, make_generator(5))] + [
        phonebook_prompt(10, make_generator(i))[0] for i in range(20)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   bos_token="<|endoftext|>")


TOKENIZERS = {"char": char_tokenizer, "bpe": bpe_tokenizer}


class FakeLM(torch.nn.Module):
    """A causal LM given by a rule on the prefix (``rule(prefix, lm) -> next id``), with the
    interface the analysis reads (tokenizer, device, arch, cfg.n_ctx)."""

    def __init__(self, rule, tokenizer):
        super().__init__()
        self.tokenizer, self.rule = tokenizer, rule
        self.arch, self.cfg, self.device = pc.HF_TRANSFORMER, SimpleNamespace(n_ctx=10_000), "cpu"
        self.colon, self.newline = (tokenizer(c, add_special_tokens=False)["input_ids"][0]
                                    for c in ":\n")

    def forward(self, tokens):
        V = len(self.tokenizer)
        out = torch.zeros(*tokens.shape, V)  # [batch, pos, vocab]
        for b, row in enumerate(tokens.tolist()):
            for t in range(len(row)):
                out[b, t, self.rule(row[: t + 1], self) % V] = 1.0
        return out


def copier(prefix: list[int], lm=None) -> int:
    """Hash-copy (copy paper §2): the token after the latest earlier occurrence of the longest
    suffix (up to 40 tokens) of the prefix; token 1 if none."""
    text = "".join(map(chr, prefix))
    for k in range(min(40, len(text) - 1), 0, -1):
        i = text.rfind(text[-k:], 0, len(text) - 1)
        if i >= 0:
            return prefix[i + k]
    return 1


def newline_after_colon(prefix: list[int], lm) -> int:
    """The copier, but a colon is followed by a newline: every phone-book answer is an empty
    first line (wrong), although the number follows on the next line."""
    return lm.newline if prefix[-1] == lm.colon else copier(prefix)


def bigram(prefix: list[int], lm) -> int:
    return (prefix[-1] * 7 + 3) % 60 + 3


def position_hash(prefix: list[int], lm) -> int:
    return (sum(prefix) * 31 + len(prefix)) % 70 + 2


def plain_greedy_right(model, p: pc.Prompt) -> bool:
    """The authors' protocol: decode the whole budget (stop at EOS), cut, strip, compare."""
    seq, gen = list(p.ids), []
    for _ in range(p.budget):
        nxt = int(model(torch.tensor([seq]))[0, -1].argmax())
        if nxt == model.tokenizer.eos_token_id:
            break
        gen.append(nxt)
        seq.append(nxt)
    text = pc.decode(model.tokenizer, gen)
    if p.end == PHONEBOOK_END:
        return text.split("\n")[0].strip() == p.answer
    return text.split("\n\n")[0].replace("\n", " ").strip() == p.answer


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
@pytest.mark.parametrize("rule", [copier, newline_after_colon, bigram, position_hash])
def test_greedy_verdicts_equal_plain_greedy_decoding(rule, tokenizer):
    model = FakeLM(rule, TOKENIZERS[tokenizer]())
    text = generated_text(300, make_generator(0))
    ids = model.tokenizer(text, add_special_tokens=False)["input_ids"]
    prompts = (pc.phonebook_prompts(model.tokenizer, 4, 3, seed=0)
               + pc.copy_prompts(model.tokenizer, ids, 12, 3, seed=0))
    got = [v for v, _ in pc.greedy_verdicts(model, prompts, batch_size=2)]
    assert got == [plain_greedy_right(model, p) for p in prompts]
    right = {copier: [True] * 6, newline_after_colon: [False] * 3 + [True] * 3}
    assert got == right.get(rule, [False] * 6)  # the copier copies; the others cannot


def test_evaluate_is_na_past_an_attention_models_context():
    model = FakeLM(copier, char_tokenizer())
    model.cfg.n_ctx = 50
    r = pc.evaluate(model, pc.phonebook_prompts(model.tokenizer, 5, 2, seed=0), 2)
    assert r["acc"] is None and "context (50)" in r["note"]
    model.cfg.n_ctx = 10_000
    r = pc.evaluate(model, pc.phonebook_prompts(model.tokenizer, 5, 2, seed=0), 2)
    assert r["acc"] == 1.0 and r["sample"]["output"].strip() == r["sample"]["answer"]


# ---------------------------------------------------------------------------- the CLI
def test_cli_on_two_tiny_hf_models_offline(hf_dirs, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "analyses.pretrained_copy",
                        str(hf_dirs["gpt_neox"]), str(hf_dirs["mamba2"]), "--entries", "3,5",
                        "--lengths", "4,8", "--n-examples", "3", "--out", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "pretrained_copy.png").stat().st_size > 0
    d = json.loads((out / "pretrained_copy.json").read_text())
    assert set(d["models"]) == {"gpt_neox", "mamba2"}
    assert d["models"]["mamba2"]["arch"] == "hf_mamba2" and d["models"]["mamba2"]["context"] is None
    for task, key, sizes in (("phonebook", "entries", [3, 5]), ("copy", "tokens", [4, 8])):
        for rows in d[task]["curves"].values():
            assert [x[key] for x in rows] == sizes
            assert all(0.0 <= x["acc"] <= 1.0 and x["n"] == 3 for x in rows)
    assert d["copy"]["text"]["natural"] is False and "not natural" in d["copy"]["text"]["note"]
    ex = d["phonebook"]["example"]  # the first prompt, for a reader to see the format
    assert ex["prompt"].count("\n\n") == 2 and ex["prompt"].endswith(":")
    assert re.fullmatch(r"\d{3}-\d{3}-\d{4}", ex["answer"])
    ex = d["copy"]["example"]
    text, again, first = ex["prompt"].split("\n\n")
    assert text == again and text == " ".join(filter(None, (first, ex["answer"])))
    assert "not natural" in r.stdout and "phonebook" in r.stdout
    assert all(c.measure(d)[1] is None for c in pc.FIGURE.claims)  # not the paper's pair


def test_text_file_shuffle_and_context_limit(hf_dirs, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("It was the best of times, it was the worst of times, it was the age of "
                    "wisdom, it was the age of foolishness (Dickens).\n" * 3)  # no ( ) in CHARS
    out = tmp_path / "out"
    argv = [str(hf_dirs["gpt_neox"]), str(hf_dirs["mamba2"]), "--entries", "3,20", "--tasks",
            "phonebook,copy", "--lengths", "6", "--n-examples", "2", "--text", str(text),
            "--shuffle", "--out", str(out)]
    assert pc.main(argv) == 0
    d = json.loads((out / "pretrained_copy.json").read_text())
    assert d["copy"]["text"] == {"source": str(text), "natural": True, "shuffled": True,
                                 "note": None, "unknown_tokens": {"gpt_neox": 6, "mamba2": 6}}
    neox, mamba = d["phonebook"]["curves"]["gpt_neox"], d["phonebook"]["curves"]["mamba2"]
    assert neox[1]["acc"] is None and "context (256)" in neox[1]["note"]  # 20 lines > 256 chars
    assert mamba[1]["acc"] is not None  # an SSM has no context limit
    assert pc.main([*argv[:2], "--tasks", "copy", "--lengths", "6", "--n-examples", "1",
                    "--out", str(out)]) == 0
    assert "phonebook" not in json.loads((out / "pretrained_copy.json").read_text())


@pytest.mark.parametrize("case,message", [
    ("missing", "no such file or directory"),
    ("bert", "not a causal language model"),
    ("no_tokenizer", "no usable tokenizer"),
    ("pt", "a suite checkpoint"),
    ("none", "give one or more HuggingFace causal LMs"),
    ("entries", "phone books need >= 3 entries"),
    ("text", "--text"),
    ("tasks", "--tasks must be among"),
    ("short_text", "fewer than the longest copy length"),
])
def test_bad_input_is_one_line(hf_dirs, tmp_path, monkeypatch, capsys, case, message):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    good = str(hf_dirs["mamba2"])
    if case == "bert":
        bad = [good, str(hf_dirs["bert"])]
    elif case == "no_tokenizer":
        model, _ = tiny_hf_model("gpt_neox")
        model.save_pretrained(tmp_path / "bare")
        bad = [str(tmp_path / "bare")]
    else:
        short = tmp_path / "short.txt"
        short.write_text("too short")
        bad = {"missing": [good, str(tmp_path / "nowhere")], "pt": [str(tmp_path / "m.pt")],
               "none": [], "entries": [good, "--entries", "2,5"],
               "text": [good, "--text", str(tmp_path / "nope.txt")],
               "tasks": [good, "--tasks", "lookup"],
               "short_text": [good, "--text", str(short), "--lengths", "50"]}[case]
    capsys.readouterr()  # saving a fixture prints a progress bar
    assert pc.main([*bad, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- claims
def result(accs: dict, archs: dict, natural: bool = True, entries=(20, 70, 100)) -> dict:
    """A hand-made JSON: per model, phone-book accuracies at ``entries`` and copy accuracies
    at two lengths (the same numbers)."""
    return {
        "models": {k: {"arch": archs[k]} for k in accs},
        "phonebook": {"entries": list(entries), "curves": {
            k: [{"entries": L, "acc": a} for L, a in zip(entries, v, strict=True)]
            for k, v in accs.items()}},
        "copy": {"lengths": [50, 100], "text": {"natural": natural}, "curves": {
            k: [{"tokens": n, "acc": a} for n, a in zip((50, 100), v[-2:], strict=True)]
            for k, v in accs.items()}}}


T, M = pc.HF_TRANSFORMER, pc.HF_MAMBA


def test_claims_hold_and_fail_on_hand_made_json():
    archs = {"pythia-410m": T, "mamba-2.8b-hf": M}
    good = result({"pythia-410m": [1.0, 0.9, 0.8], "mamba-2.8b-hf": [1.0, 0.3, 0.1]}, archs)
    assert pc.claim_phonebook(good)[1] is True and pc.claim_copy(good)[1] is True
    assert "pythia-410m 0.85" in pc.claim_phonebook(good)[0]  # the mean over L >= 70
    # Mamba ahead on long books, though Pythia leads at L = 20
    bad = result({"pythia-410m": [1.0, 0.3, 0.2], "mamba-2.8b-hf": [0.5, 0.6, 0.4]}, archs)
    assert pc.claim_phonebook(bad)[1] is False and pc.claim_copy(bad)[1] is False


def test_claims_are_na_without_the_papers_pair_or_setting():
    accs = {"gpt_neox": [1.0, 1.0, 1.0], "mamba2": [0.0, 0.0, 0.0]}
    d = result(accs, {"gpt_neox": T, "mamba2": pc.HF_MAMBA2})  # right archs, not Pythia
    assert pc.claim_phonebook(d) == (pc.claim_phonebook(d)[0], None)
    assert "needs a Pythia and a Mamba" in pc.claim_phonebook(d)[0]
    pair = {"pythia-1b": [1.0, 1.0, 1.0], "mamba-130m": [0.0, 0.0, 0.0]}
    assert pc.claim_phonebook(result(pair, {"pythia-1b": T, "mamba-130m": T}))[1] is None
    short = result(pair, {"pythia-1b": T, "mamba-130m": M}, entries=(5, 20, 40))
    assert pc.claim_phonebook(short)[1] is None  # no book of >= 70 entries
    generated = result(pair, {"pythia-1b": T, "mamba-130m": M}, natural=False)
    assert pc.claim_copy(generated)[1] is None and "not natural" in pc.claim_copy(generated)[0]
    assert pc.claim_phonebook(generated)[1] is True
    assert pc.claim_copy({"models": {}})[1] is None
