"""A griffe extension for the API reference: the docstrings use Sphinx cross-reference roles
(``:func:`models.load```, ``:class:`~models.base.SuiteModel```), which Markdown would show
as written; this turns each into a code span of the name (``~`` keeps the last part, as Sphinx
does). Named in mkdocs.yml; not a page (``exclude_docs``)."""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(
    r":(?:py:)?(?:func|meth|class|mod|attr|data|obj|exc|const|term|ref):`(~?)([^`]+)`")


def _plain(m: re.Match) -> str:
    name = m[2].strip()
    if m[1]:
        name = name.rsplit(".", 1)[-1]
    return f"`{name}`"


class SphinxRoles(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_plain, obj.docstring.value)
