"""mkdocs hook: fills the public-names page (docs/api/index.md) from the code.

The table lists ``omni_core.__all__`` (each name with the module that defines it, linked to its
reference) and ``omni_core.views.PUBLIC_MODULES`` (the modules a plugin may import), so the page
cannot drift from what ``import omni_core`` offers.
"""

from __future__ import annotations

from typing import Any

MARKER = "<!-- public names -->"


def _table() -> str:
    import omni_core
    from omni_core.views import PUBLIC_MODULES

    constants = {"ENTRY_POINT_GROUP", "PLUGIN_API_VERSION"}  # no __module__ of their own
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
