"""The index read at a glance (issue 55): a summary at the top, each paper a heading and its
claims as rows (claim, verdict, one number, a link to the section), whose counts equal the
claim rows below; anchors and a table of contents in the HTML; long text folded; a repeated
row shown once; margins in words."""

from __future__ import annotations

import re

from analyses.claims import Claim, Figure, Margin, Reading, Undecided
from analyses.reproduce.index import Outcome, margin_text, write_index
from analyses.reproduce.plan import Job

LONG = "a measurement of many words " * 20


def reading(text, verdict, margin=None):
    return lambda d: Reading(text, verdict, margin)


def outcomes() -> list[Outcome]:
    exact = Margin("largest error", 0.0, "<=", 0.0)
    copy_a = Figure("Copy heads", "Copy paper Fig. 3", (Claim("heads match", reading("x", 1)),))
    copy_b = Figure("Copy bounds", "Copy paper Thm 2.3", (
        Claim("the construction copies", reading("err 0", True, exact)),
        Claim("the construction copies", reading("err 0", True, exact)),  # the same row again
        Claim("a GSSM fails", reading(LONG, None))))
    markov = Figure("Markov decay", "Markov paper Fig. 4", (
        Claim("a_t drops", reading("0.2", False, Margin("drop", 0.2, ">=", 0.5))),
        Claim("it matches add-β", reading("short", Undecided.regime("1 seed")))))
    failed = Figure("Markov failed", "Markov paper Fig. 5", (Claim("never read", reading("", 1)),))
    made = []
    for name, fig in (("copy_a", copy_a), ("copy_b", copy_b), ("markov", markov)):
        claims = [(c.paper, *c.measure({})) for c in fig.claims]
        margins = [c.measure({}).margin for c in fig.claims]
        made.append(Outcome(Job(name, (), figure=fig), True, 1.0, "", claims, margins))
    made.append(Outcome(Job("failed", (), figure=failed), False, 1.0, "boom", []))
    return made


def section_rows(md: str) -> list[list[str]]:
    """The claim rows of the sections below the summary: 4-cell rows under each
    "| paper's claim |" header."""
    body = md.split("\n## Summary", 1)[1].split("<a id=", 1)[1]
    rows = []
    for table in body.split("| paper's claim | measured here | verdict | margin |")[1:]:
        for line in table.splitlines()[2:]:
            if not line.startswith("| "):
                break
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def test_the_summarys_counts_equal_the_rows_below(tmp_path):
    write_index(outcomes(), tmp_path, "quick")
    md = (tmp_path / "index.md").read_text()
    assert md.splitlines()[2].startswith("Made ")  # what made it stays first
    rows = section_rows(md)
    below = {"holds": 0, "does not hold": 0, "not decided": 0, "n/a": 0}
    for row in rows:
        verdict = row[2]
        below["not decided" if verdict.startswith("not decided") else verdict] += 1
    assert below == {"holds": 2, "does not hold": 1, "not decided": 1, "n/a": 1}
    summary = md.split("## Summary", 1)[1].split("<a id=", 1)[0]
    assert "5 claims: 2 hold, 1 does not hold, 1 not decided, 1 n/a" in summary
    assert "1 of 4 analyses have no claims to count: failed (FAILED)" in summary
    # each paper a heading, each claim a row linking to its section
    assert summary.index("### Copy paper") < summary.index("### Markov paper")
    summary_rows = [r for r in summary.splitlines() if r.startswith("| ") and "](#" in r]
    assert sum("](#copy_b)" in r for r in summary_rows) == 2  # the repeated claim once
    assert "| a\\_t drops | does not hold | drop 0.2 | [Markov decay](#markov) |" in summary
    assert '<a id="copy_b"></a>' in md


def test_the_html_has_anchors_contents_and_folds_long_text(tmp_path):
    write_index(outcomes(), tmp_path, "quick")
    page = (tmp_path / "index.html").read_text()
    assert "<nav><h2>Contents</h2>" in page and "href='#copy_b'" in page
    assert "<section id='copy_b'>" in page and "<h2 id='summary'>" in page
    assert page.count("<details><summary>") == 1  # the long measurement, folded
    assert "class='counts'>5 claims: 2 hold" in page


def test_margins_are_words_where_the_symbols_said_nothing():
    assert margin_text(Margin("largest error", 0.0, "<=", 0.0)) == (
        "largest error 0; the claim needs at most 0: exactly at the limit")
    assert margin_text(Margin("score", 0.986, ">=", 0.5)).endswith("0.486 to spare")
    assert margin_text(Margin("drop", 0.2, ">=", 0.5)).endswith("0.3 short")
