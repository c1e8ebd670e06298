"""Shared outputs and the index on bad inputs (issue 29 items 11, 12): every output is written
atomically under a writer's own temp name, one analysis' outputs have one writer at a time, and
``reproduce --index-only`` turns each bad JSON into one line while the rest still index."""

import json
import os
import threading

import pytest

from analyses.claims import Claim, Figure
from analyses.reproduce import index as reproduce_index
from analyses.reproduce.index import write_index
from analyses.reproduce.plan import Job
from seqprobe.atomic import output_lock, write_atomic
from seqprobe.errors import InputError

FIG = Figure("F", "Paper Fig. 1", (Claim("x is big", lambda d: ("x = 3", d["x"] > 2)),))


def index_of(stem, out):
    o = reproduce_index.index_outcome(Job(stem, (), figure=FIG), out, {})
    write_index([o], out, "quick")
    return o


def test_write_atomic_leaves_no_temp_and_never_half_a_file(tmp_path):
    target = tmp_path / "r.json"
    done = []

    def writer(i):
        for _ in range(20):
            write_atomic(target, json.dumps({"writer": i, "pad": "x" * 20000}))
        done.append(i)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for _ in range(50):  # a reader during the writes sees one whole file or another
        if target.exists():
            assert json.loads(target.read_text())["writer"] in (0, 1, 2)
    for t in threads:
        t.join()
    assert sorted(done) == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left


def test_a_second_writer_of_the_same_outputs_is_refused(tmp_path):
    with output_lock(tmp_path, "stu_induction"):
        pid = os.fork()
        if pid == 0:  # another process, as a second analysis run would be
            try:
                with output_lock(tmp_path, "stu_induction"):
                    os._exit(0)
            except InputError as e:
                os._exit(3 if "another process is writing stu_induction" in str(e) else 4)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 3
        with output_lock(tmp_path, "markov_holdout"):  # other analyses are not held up
            pass
    with output_lock(tmp_path, "stu_induction"):  # released with its holder
        pass


@pytest.mark.parametrize("content", [b'{"x": 3', b"\x00\xff\xfe binary", b"[" * 200_000,
                                     b"[1, 2]", b""],
                         ids=["truncated", "binary", "deep", "not-an-object", "empty"])
def test_a_bad_json_is_one_line_and_the_index_is_still_built(tmp_path, content):
    (tmp_path / "f.json").write_bytes(content)
    o = index_of("f", tmp_path)
    assert not o.ok and "f.json" in o.log_tail and "\n" not in o.log_tail
    assert "**FAILED**" in (tmp_path / "index.md").read_text()


def test_a_directory_or_fifo_in_place_of_a_json_is_named_not_read(tmp_path):
    (tmp_path / "f.json").mkdir()
    assert "is a directory" in index_of("f", tmp_path).log_tail
    os.rmdir(tmp_path / "f.json")
    os.mkfifo(tmp_path / "f.json")  # opening it for reading would block for ever
    assert "not a regular file" in index_of("f", tmp_path).log_tail


def test_malformed_timings_are_ignored_with_one_line(tmp_path, capsys):
    (tmp_path / "f.json").write_text(json.dumps({"x": 3}))
    for bad in ('{"f": {"seconds": "soon", "ok": "yes"}}', "[]", "{"):
        (tmp_path / "reproduce_timings.json").write_text(bad)
        timings = reproduce_index.read_timings(tmp_path / "reproduce_timings.json")
        o = reproduce_index.index_outcome(Job("f", (), figure=FIG), tmp_path, timings.get("f", {}))
        assert o.seconds is None
    assert capsys.readouterr().err.count("ignoring") == 2


def test_claim_text_is_escaped_and_bounded_in_both_indexes(tmp_path):
    evil = "<script>alert(1)</script> [click](javascript:alert(1)) " + "x" * 5000
    fig = Figure("F", "Paper Fig. 1", (Claim("c", lambda d: (d["m"], True)),))
    (tmp_path / "f.json").write_text(json.dumps({"m": evil}))
    o = reproduce_index.index_outcome(Job("f", (), figure=fig), tmp_path, {})
    write_index([o], tmp_path, "quick")
    md, page = (tmp_path / "index.md").read_text(), (tmp_path / "index.html").read_text()
    assert "<script>" not in md and "<script>" not in page
    assert "](javascript:" not in md
    assert len(o.claims[0][1]) <= reproduce_index.MAX_CLAIM_CHARS


def test_the_lock_creates_a_new_output_directory(tmp_path):
    with output_lock(tmp_path / "new" / "out", "f") as lock:
        assert lock.parent.is_dir()


def test_a_refused_run_leaves_no_new_output_directory(tmp_path):
    with pytest.raises(InputError), output_lock(tmp_path / "a" / "out", "f"):
        raise InputError("refused")
    assert not (tmp_path / "a").exists()
