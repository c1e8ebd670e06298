"""mkdocs hook: docs/tl_surface.md (the TransformerLens-method table, written by another piece
of work) joins the nav after "Hooks vs TransformerLens" once the file exists, so the strict
build passes both before and after it lands. Named in mkdocs.yml (``hooks``); not a page."""

from __future__ import annotations

from pathlib import Path

PAGE, TITLE, AFTER = "tl_surface.md", "TransformerLens surface", "hooks-vs-tl.md"


def on_config(config):
    nav = config["nav"]
    listed = any(PAGE in entry.values() for entry in nav if isinstance(entry, dict))
    if (Path(config["docs_dir"]) / PAGE).is_file() and not listed:
        at = next((i for i, entry in enumerate(nav)
                   if isinstance(entry, dict) and AFTER in entry.values()), len(nav) - 1)
        nav.insert(at + 1, {TITLE: PAGE})
    return config
