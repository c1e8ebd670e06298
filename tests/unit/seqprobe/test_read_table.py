"""seqprobe.atomic.read_table: a table the suite only estimates from is read whole, or not at
all — missing, unreadable or of another format gives an empty one, never an error."""

from __future__ import annotations

import json

from seqprobe.atomic import read_table


def test_a_table_of_its_format_is_read_and_any_other_is_empty(tmp_path):
    path = tmp_path / "t.json"
    assert read_table(path, 1) == {}  # missing
    path.write_text("{not json")
    assert read_table(path, 1) == {}
    path.write_text(json.dumps([1, 2]))
    assert read_table(path, 1) == {}  # not an object
    path.write_text(json.dumps({"format": 2, "rows": {"a": 1}}))
    assert read_table(path, 1) == {}
    assert read_table(path, 2) == {"format": 2, "rows": {"a": 1}}
