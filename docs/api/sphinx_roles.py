"""griffe extension: reST roles in docstrings (``:class:`~omni_core.x.Name```) as Markdown code.

The code's docstrings use Sphinx cross-reference roles; mkdocstrings renders Markdown, where a
role would show as raw text. ``:role:`~a.b.Name``` becomes ```Name``` and ``:role:`a.b.Name```
becomes ```a.b.Name``` (the name, as code; the reference pages link the documented names).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")


def markdown(text: str) -> str:
    return ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", text)


class SphinxRoles(griffe.Extension):
    def on_object(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
