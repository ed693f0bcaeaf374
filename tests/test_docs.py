"""The docs site (mkdocs.yml): it builds with --strict (broken links and docstring problems fail it), every public
name has an API entry, the user pages carry no internal references, and the quick start's block runs as printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import yaml

import capgeo_callbacks

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# what a user page must not carry: the project's own bookkeeping (issue numbers, rounds, machines, commits)
INTERNAL = {
    "an issue number": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    "a round": re.compile(r"\b(this|previous|last|next|that) round('s)?\b", re.IGNORECASE),
    "a machine name": re.compile(r"\bvm\b", re.IGNORECASE),
    "a machine word": re.compile(r"\b(lent|this session|this (\d+-core (CPU |GPU )?|CPU |GPU )machine|the "
                                 r"project's (\d+-core )?machine)\b", re.IGNORECASE),
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
}
# record pages (Study) keep provenance (commits, where runs were made) in a section of their own; the rest of them
# carries no issue number, round or machine word either; these are the ones a reader meets first
RECORD_PAGES = ("evidence.md", "who-learns.md", "grokking.md", "heldout.md", "overhead.md", "benchmarks.md",
                "fresh-seeds.md", "main-command/parity.md")


def nav_pages(section: str) -> list[str]:
    """The pages of a top-level section of the site's nav (its sub-sections included)."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(entry: object) -> list[str]:
        if isinstance(entry, str):
            return [entry]
        if isinstance(entry, list):
            return [page for item in entry for page in pages(item)]
        if isinstance(entry, dict):
            return [page for value in entry.values() for page in pages(value)]
        return []

    return [page for item in nav for title, value in item.items() if title == section for page in pages(value)]


def test_user_and_study_pages_are_apart() -> None:
    user, study = nav_pages("User guide"), nav_pages("Study")
    assert "glossary.md" in user and "callbacks.md" in user and "install.md" in user
    assert "study.md" in study and "heldout.md" in study and not set(user) & set(study)
    listed = {page for section in ("Home", "User guide", "API", "Study") for page in nav_pages(section)}
    kept_out = set(yaml.safe_load((ROOT / "mkdocs.yml").read_text()).get("not_in_nav", "").split())
    missing = [path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")
               if path.relative_to(DOCS).as_posix() not in listed and f"/{path.relative_to(DOCS).as_posix()}"
               not in kept_out]
    assert not missing, f"pages in docs/ but in no section of the nav (nor in not_in_nav): {missing}"
    assert "your-model-gaps.md" not in listed  # a record of how the examples were made, not a user page


@pytest.mark.parametrize("page", ["../README.md", *nav_pages("Home"), *nav_pages("User guide"), *nav_pages("API")])
def test_user_pages_carry_no_internal_references(page: str) -> None:
    text = (DOCS / page).read_text()
    found = {what: pattern.findall(text) for what, pattern in INTERNAL.items() if pattern.search(text)}
    assert not found, f"docs/{page} carries {found}"


def without_provenance(text: str) -> str:
    """A page without its provenance sections (a heading with "Provenance", to the next heading of its level)."""
    return re.sub(r"^(#+) [^\n]*Provenance[^\n]*\n.*?(?=^\1 |\Z)", "", text, flags=re.M | re.S)


@pytest.mark.parametrize("page", RECORD_PAGES)
def test_record_pages_keep_internal_references_to_their_provenance(page: str) -> None:
    assert page in nav_pages("Study")
    text = without_provenance((DOCS / page).read_text())
    kinds = [what for what in INTERNAL if what != "a commit hash"]  # a measurement's code is named beside it
    found = {what: INTERNAL[what].findall(text) for what in kinds if INTERNAL[what].search(text)}
    assert not found, f"docs/{page} carries {found} outside its provenance"


def test_the_registered_pages_name_commits_in_their_provenance_only() -> None:
    for page in ("who-learns.md", "grokking.md"):
        text = (DOCS / page).read_text()
        assert "## Provenance" in text and not INTERNAL["a commit hash"].search(without_provenance(text))


def test_the_internal_reference_patterns_catch_what_they_name() -> None:
    sample = "as issue 28 says, this round, on vm at 8a92cf78, lent, on this 2-core CPU machine"
    assert all(pattern.search(sample) for pattern in INTERNAL.values())
    assert not any(pattern.search("RankMe of 2048 rows, VMware-free, a deadline, step 1000, the run session, on a "
                                  "2-core CPU, the machine's cores, the cluster this machine belongs to")
                   for pattern in INTERNAL.values())
    assert without_provenance("# A\nx\n## Provenance\nabc1234\n## B\ny\n") == "# A\nx\n## B\ny\n"


def normalised(text: str) -> str:
    return " ".join(text.replace(">", " ").split())


def test_the_readme_and_the_quick_start_say_the_same_of_what_a_module_provides() -> None:
    readme, quickstart = (ROOT / "README.md").read_text(), (DOCS / "quickstart.md").read_text()
    box = re.search(r"> \*\*Your module provides\*\*\n>\n(.*?)\n\n", readme, re.S).group(1)
    items = [normalised(item) for item in re.split(r"\n> - ", "\n" + box) if item.strip()]
    assert len(items) == 3 and any(item.startswith("**What is not found**") for item in items)
    assert all(item in normalised(quickstart) for item in items)


def test_the_quick_start_block_runs_as_printed() -> None:
    block = re.search(r"```python\n(.*?)```", (DOCS / "quickstart.md").read_text(), re.DOTALL).group(1)
    scope: dict = {}
    exec(compile(block, "docs/quickstart.md", "exec"), scope)  # noqa: S102 - the page's own code
    names = [type(callback).__name__ for callback in scope["trainer"].callbacks]
    for expected in ("EvaluationSchedule", "RankMeMonitor", "LinearProbeMonitor", "PrecursorDetector",
                     "StepProgressBar"):
        assert expected in names


def read_inventory(path: Path) -> set[str]:
    """The object names of a Sphinx inventory (objects.inv, version 2: four header lines, then zlib)."""
    data = path.read_bytes()
    header, body = data.split(b"\n", 4)[:4], data.split(b"\n", 4)[4]
    assert header[0] == b"# Sphinx inventory version 2"
    return {line.split(" ", 1)[0] for line in zlib.decompress(body).decode().splitlines() if line}


@pytest.mark.slow
def test_the_site_builds_strict_with_an_entry_for_every_public_name(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    entries = read_inventory(site / "objects.inv")
    missing = [name for name in capgeo_callbacks.__all__ if f"capgeo_callbacks.{name}" not in entries]
    assert not missing, f"public names without an API entry: {missing}"
    assert "capgeo_callbacks.integrations.hf.CapgeoTrainerCallback" in entries
    text = (site / "api" / "callbacks" / "index.html").read_text()
    assert ":class:" not in text and ":func:" not in text  # Sphinx roles shown as code, not as written
