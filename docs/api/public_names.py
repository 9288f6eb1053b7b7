"""mkdocs hook: fills the public-names page (docs/api/index.md) from the manifest.

One table per tier of :mod:`omni_core.public` (embedders, hook authors, stage-kind authors, the
testing kit): each public module's names, each linked to its reference, so the page cannot drift
from the manifest, and ``--strict`` fails on a public name the reference does not render. A page
holding ``<!-- tier: MODULE -->`` gets a ``:::`` directive for each of that public module's names
no hand-written page of docs/api renders (:func:`rendered`).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.public_names")  # mkdocs --strict fails on its warnings
MARKER = "<!-- public names -->"
API = Path(__file__).parent
_TIER = re.compile(r"<!-- tier: ([\w.]+) -->")
_DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:    .*\n|\n)*)", re.M)
_MEMBERS = re.compile(r"members: \[([^\]]*)\]")


def rendered(pages: list[str]) -> set[str]:
    """What the ``:::`` directives of ``pages`` render: an object's identifier, or a module's
    (all its public members), or ``module.member`` for each of a ``members: [...]`` option."""
    out: set[str] = set()
    for text in pages:
        for ident, options in _DIRECTIVE.findall(text):
            members = _MEMBERS.search(options)
            if members:
                out |= {f"{ident}.{m.strip()}" for m in members.group(1).split(",")}
            else:
                out.add(ident)
    return out


def unrendered(module: str, pages: list[str]) -> list[str]:
    """``home.name`` of each public name of ``module`` that ``pages`` do not render."""
    from omni_core.public import names_of

    done = rendered(pages)
    return [
        f"{home}.{name}"
        for name, home in names_of(module).items()
        if not {f"{home}.{name}", home, f"{module}.{name}", module} & done
    ]


def _tier_directives(markdown: str) -> str:
    others = [p.read_text() for p in sorted(API.glob("*.md")) if not _TIER.search(p.read_text())]

    def directives(match: re.Match[str]) -> str:
        return "\n\n".join(f"::: {ident}" for ident in unrendered(match.group(1), others))

    return _TIER.sub(directives, markdown)


def _table() -> str:
    from omni_core.public import TIERS

    out = []
    for tier in TIERS:
        out += [f"## {tier.audience.capitalize()}: `{tier.module}`", ""]
        out += ["| name | import from | defined in |", "|---|---|---|"]
        for module, names in tier.modules.items():
            for name in sorted(names, key=str.lower):
                home = names[name]
                out.append(f"| [`{name}`][{home}.{name}] | `{module}` | `{home}` |")
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if _TIER.search(markdown):
        return _tier_directives(markdown)
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
