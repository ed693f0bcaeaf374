"""The README a newcomer reads in five minutes: at most 150 lines, every link it makes leads to a file, and every
module its commands run exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "study" / "corpus"  # the committed runs
README = (ROOT / "README.md").read_text()


def test_the_readme_fits_in_150_lines() -> None:
    assert len(README.splitlines()) <= 150


def test_every_relative_link_leads_to_a_file() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)", README)
    local = [target for target in targets if "://" not in target]
    assert local, "the README links nothing"
    missing = [target for target in local if not (ROOT / target).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_every_module_the_readme_runs_exists() -> None:
    modules = set(re.findall(r"python -m ([\w.]+)", README)) - {"pytest"}
    assert modules
    missing = [name for name in sorted(modules) if importlib.util.find_spec(name) is None]
    assert not missing, f"README runs modules that do not exist: {missing}"


def test_no_placeholder_is_left() -> None:
    assert not re.search(r"\b(TODO|TBD|XXX|[A-Z]+_(TABLE|N))\b", README)


def test_the_acquisition_defaults_it_quotes_are_the_librarys() -> None:
    from capgeo_callbacks import DetectionSettings

    found = DetectionSettings()
    assert f"DetectionSettings(threshold={found.threshold:g}, patience={found.patience})" in README


def test_the_line_that_adds_the_probability_runs_as_printed() -> None:
    """The one line, run on a folder of finished runs (the registered calibration runs of capgeo's own tasks, in place
    of the user's lightning_logs/): the detector runs the default rules and a fitted probability."""
    pytest.importorskip("lifelines")
    from capgeo_callbacks import PrecursorDetector, default_rules
    from capgeo_callbacks.rules import SurvivalForecaster
    from capgeo_callbacks.scoring import load_runs

    line = re.search(r"`(PrecursorDetector\(rules=\[\*default_rules\(\), SurvivalForecaster\(\)[^`]*)`",
                     README).group(1)
    folder = str(CORPUS / "who-learns" / "calibration")
    scope = {"PrecursorDetector": PrecursorDetector, "default_rules": default_rules,
             "SurvivalForecaster": SurvivalForecaster, "load_runs": load_runs}
    detector = eval(line.replace('"lightning_logs/"', repr(folder)), scope)  # noqa: S307 - the README's own line
    names = [rule.name for rule in detector.session.rules]
    assert names[:-1] == [rule.name for rule in default_rules()] and names[-1] == "survival"
    assert detector.session.rules[-1].coef_ is not None
