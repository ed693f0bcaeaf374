"""MkDocs hooks of the docs site (mkdocs.yml).

- The API pages list every public name of ``capgeo_callbacks`` (its ``__all__``), each on the page of the subpackage
  it comes from, so a name added to ``__all__`` gets its entry without editing a page. A page holds
  ``<!-- api: GROUP -->`` where its entries go; :data:`GROUPS` says which subpackages each group takes. A public
  name that no group takes fails the build, naming it.
- A page's link to a file of the repository outside docs/ (``../examples/own_model.py``), which works where the
  Markdown is read in the repository, is checked (a missing file fails the build, as a broken link does) and
  becomes a link to the file in the repository (``repo_url``), or its path as code where no ``repo_url`` is set.
- The docstrings' Sphinx roles (``:class:`~capgeo_callbacks.RankMeMonitor```), which mkdocstrings shows as written,
  are shown as code: the name (the last component after ``~``).
"""

from __future__ import annotations

import ast
import logging
import os
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "capgeo_callbacks"
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")
ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj|math):<code>(~?)([^<]*)</code>")
log = logging.getLogger("mkdocs.hooks.capgeo")
GROUPS = {
    "callbacks": ("capgeo_callbacks.callbacks", "capgeo_callbacks.publish"),
    "measures": ("capgeo_callbacks.measures", "capgeo_callbacks.capture"),
    "detection": ("capgeo_callbacks.detection",),
    "rules": ("capgeo_callbacks.rules",),
    "registry": ("capgeo_callbacks.registry",),
    "run": ("capgeo_callbacks.run",),
}


def public_names() -> dict[str, str]:
    """Each name of ``capgeo_callbacks.__all__`` -> the module ``capgeo_callbacks/__init__.py`` imports it from
    (read from the source: the docs build imports no torch)."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    source = {alias.asname or alias.name: node.module for node in tree.body if isinstance(node, ast.ImportFrom)
              and node.module for alias in node.names}
    [exported] = [node.value for node in tree.body if isinstance(node, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
    return {name: source[name] for name in ast.literal_eval(exported)}


def group_of(module: str) -> str | None:
    return next((group for group, prefixes in GROUPS.items() if module.startswith(prefixes)), None)


def on_config(config: Any) -> Any:
    unplaced = [name for name, module in public_names().items() if group_of(module) is None]
    if unplaced:
        raise ValueError(f"docs/hooks.py: no API page takes {', '.join(unplaced)}; add its subpackage to GROUPS")
    return config


def outside_links(markdown: str, page_path: str, docs_dir: str, repo_url: str | None) -> str:
    """``markdown`` with its links to repository files outside ``docs_dir`` made to work on the site."""
    docs = Path(docs_dir).resolve()
    folder = (docs / page_path).parent

    def replace(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return match.group(0)
        path = Path(os.path.normpath(folder / target))
        if path.is_relative_to(docs):
            return match.group(0)  # mkdocs checks these itself
        if not path.is_relative_to(ROOT) or not path.exists():
            log.warning("Doc file '%s' links to '%s', which is not in the repository", page_path, target)
            return match.group(0)
        where = path.relative_to(ROOT).as_posix()
        if repo_url:
            return f"[{text}]({repo_url.rstrip('/')}/{'tree' if path.is_dir() else 'blob'}/HEAD/{where})"
        return text if text.strip("`") == where else f"{text} (`{where}`)"

    return LINK.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, **_: Any) -> str:
    markdown = outside_links(markdown, page.file.src_uri, config["docs_dir"], config.get("repo_url"))
    for group in GROUPS:
        marker = f"<!-- api: {group} -->"
        if marker in markdown:
            entries = [f"::: capgeo_callbacks.{name}" for name, module in public_names().items()
                       if group_of(module) == group]
            markdown = markdown.replace(marker, "\n\n".join(entries))
    return markdown


def on_page_content(html: str, **_: Any) -> str:
    def name(match: re.Match[str]) -> str:
        shown = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
        return f"<code>{shown}</code>"

    return ROLE.sub(name, html)
