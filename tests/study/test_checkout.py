"""Where the study's committed runs are (study.checkout): a path a registration wrote before the runs moved into the
study's folder still names them."""

from __future__ import annotations

import json
import re

from study.checkout import CORPUS, ROOT, corpus_path, history_paths

FORMER = re.compile(r"\bcorpus/[\w./-]*\w")  # a path to committed runs as the registrations wrote it


def test_a_former_corpus_path_maps_into_the_study_s_folder() -> None:
    assert corpus_path("corpus/hard/sort-hard-xs-s0.json.gz") == CORPUS / "hard" / "sort-hard-xs-s0.json.gz"
    assert corpus_path("corpus/hard/sort-hard-xs-s0.json.gz").is_file()
    assert corpus_path("corpus") == CORPUS
    assert corpus_path("study/registration.json") == ROOT / "study" / "registration.json"  # not a former one
    assert corpus_path("docs/corpus.md") == ROOT / "docs" / "corpus.md"


def test_the_runs_the_registrations_name_are_where_the_mapping_says() -> None:
    """The registration and the stopping settings, committed before the runs they name, name them by their former
    paths; each maps to a folder of committed runs."""
    named = set()
    for name in ("registration.json", "stopping_settings.json"):
        text = json.dumps(json.loads((ROOT / "study" / name).read_text()))
        named |= set(FORMER.findall(text))
    assert {"corpus/hard", "corpus/controls", "corpus/heldout", "corpus/levels"} <= named
    for path in named:
        folder = corpus_path(path)
        assert folder.is_dir() and any(folder.glob("*.json.gz")), f"{path} -> {folder}: no committed runs there"
        assert not (ROOT / path).exists()  # the former place is empty: one home for the runs


def test_git_s_history_of_committed_runs_is_asked_under_both_paths() -> None:
    """A run's first commit is under its former path: the pages' 'commit that added them' asks git about both."""
    assert history_paths(CORPUS / "hard") == ["study/corpus/hard", "corpus/hard"]
    assert history_paths(ROOT / "study" / "registration.json") == ["study/registration.json"]
