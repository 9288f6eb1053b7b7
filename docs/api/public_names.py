"""mkdocs hook: fills the public-names page (docs/api/index.md) from the code.

The table lists ``omni_core.__all__`` (each name with the module that defines it, linked to its
reference) and ``omni_core.views.PUBLIC_MODULES`` (the modules a plugin may import), so the page
cannot drift from what ``import omni_core`` offers.
"""

from __future__ import annotations

import logging
import re
from typing import Any

log = logging.getLogger("mkdocs.hooks.public_names")  # mkdocs --strict fails on its warnings
MARKER = "<!-- public names -->"


def _table() -> str:
    import omni_core
    import omni_core.plugin
    from omni_core.views import PUBLIC_MODULES

    # constants and pluggy's markers: no __module__ of their own (a marker's is pluggy's)
    constants = set(omni_core.plugin.__all__)
    rows = ["| name | defined in |", "|---|---|"]
    for name in sorted(omni_core.__all__, key=str.lower):
        if name in omni_core._LAZY:
            module = omni_core._LAZY[name]
        elif name in constants:
            module = "omni_core.plugin"
        else:
            module = getattr(omni_core, name).__module__
        rows.append(f"| [`{name}`][{module}.{name}] | `{module}` |")
    modules = ["| module a plugin may import |", "|---|"]
    modules += [f"| `{name}` |" for name in sorted(PUBLIC_MODULES)]
    return "\n".join(rows) + "\n\n## Public modules\n\n" + "\n".join(modules) + "\n"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri != "api/index.md":
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/api/index.md lost its marker {MARKER!r}")
    return markdown.replace(MARKER, _table())


# A reference autorefs could not resolve stays in the page as literal text (``[name][id]``) and
# mkdocs says nothing, so ``--strict`` passed with broken links: fail the build on one.
_UNRESOLVED = re.compile(r"\]\[([A-Za-z_][\w.]*)\]")


def on_post_page(output: str, page: Any, **kwargs: Any) -> str:
    for identifier in sorted(set(_UNRESOLVED.findall(_without_code_blocks(output)))):
        log.warning("%s: unresolved cross-reference [%s]", page.file.src_uri, identifier)
    return output


def _without_code_blocks(html: str) -> str:
    """The page's HTML minus code (``<pre>`` blocks, ``<code>`` contents): code showing
    ``x[a][b]`` is not a link; a link's ``[<code>name</code>][id]`` keeps its ``][id]``."""
    html = re.sub(r"<pre.*?</pre>", "", html, flags=re.S)
    return re.sub(r"<code>.*?</code>", "<code></code>", html, flags=re.S)
