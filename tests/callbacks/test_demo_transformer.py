"""Lightning's demo transformer watched by RankMeMonitor and PrecursorDetector (demo_transformer_script.py): a
warning never stops training, whatever runs the script, and ILDR that nobody asked for is no warning."""

from __future__ import annotations

import csv
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest

from capgeo_callbacks import MeasureCallback, RankMeMonitor
from capgeo_callbacks.callbacks import never_fails
from capgeo_callbacks.run.summary import read_summary
from tests.callbacks.demo_transformer_script import fit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("demo_transformer_script.py")
FIT_LINE = next(n for n, line in enumerate(SCRIPT.read_text().splitlines(), 1) if "trainer.fit(" in line)
RULE_LEFT_OUT = "PrecursorDetector: rule 'ildr-rise' is left out of this run: it needs 'ildr/*'"
LAYERS = ["rankme/layers.0", "rankme/layers.1"]


def rankme_logged(log_dir: str | Path) -> dict[str, list[float]]:
    """RankMe of each encoder layer as the CSV logger wrote it, at the steps it wrote val/acc."""
    with (Path(log_dir) / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    steps = [row["step"] for row in rows if row.get("val/acc")]
    logged = {tag: [float(row[tag]) for row in rows if row.get(tag)] for tag in LAYERS}
    assert [row["step"] for row in rows if row.get(LAYERS[0])] == steps
    return logged


@pytest.mark.slow
@pytest.mark.parametrize("how", ["-c", "stdin"])
def test_a_fit_run_from_python_c_or_standard_input_warns_from_a_hook_and_completes(how: str, tmp_path: Path) -> None:
    """``__main__`` has no source file there: the hook's warning is shown at the script's line all the same."""
    source, args = SCRIPT.read_text(), [str(tmp_path), "--ildr-rule"]
    command = [sys.executable, "-c", source, *args] if how == "-c" else [sys.executable, "-", *args]
    result = subprocess.run(command, input=None if how == "-c" else source, capture_output=True, text=True, cwd=ROOT,
                            timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{'<string>' if how == '-c' else '<stdin>'}:{FIT_LINE}: UserWarning: {RULE_LEFT_OUT}" in result.stderr
    assert "Traceback" not in result.stderr and "failed (" not in result.stderr
    run = tmp_path / "demo" / "version_0"
    logged = rankme_logged(run)
    # RankMe of 32 pooled rows: two evaluations, each between 1 and the 32 rows' rank
    assert all(len(values) == 2 and all(1.0 <= value <= 32.0 for value in values) for values in logged.values())
    assert read_summary(run)["steps"] == 4


def test_on_the_demo_model_rankme_is_logged_and_ildr_is_noted_in_the_summary_without_a_warning(
        tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(tmp_path)
    said = [str(w.message) for w in caught]
    assert not [text for text in said if "ILDR" in text or text.startswith(("RankMeMonitor", "PrecursorDetector"))]
    monitor = next(cb for cb in trainer.callbacks if isinstance(cb, RankMeMonitor))
    assert sorted(monitor.series) == LAYERS
    assert {tag: [p[1] for p in points] for tag, points in monitor.series.items()} == rankme_logged(trainer.log_dir)
    summary = read_summary(trainer.log_dir)
    assert list(summary["measures_left_out"]) == ["ildr"]
    assert "the rows selector 'mean' takes have no target of their own" in summary["measures_left_out"]["ildr"]
    assert sorted(tag for tag in summary["series"] if tag.startswith(("rankme/", "ildr/"))) == LAYERS


class FailsEveryValidation(MeasureCallback):
    """A measure whose hook raises at every validation (under the callbacks' failure rule)."""

    @never_fails
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        raise RuntimeError("measure exploded")


CAPGEOS = ("PrecursorDetector", "RankMeMonitor", "FailsEveryValidation")  # the warnings made to fail below


@pytest.mark.parametrize("how", ["showwarning raises", "warnings are errors"])
def test_a_fit_whose_warnings_cannot_be_shown_still_completes_and_says_them_in_the_log(
        how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    shown = warnings.showwarning

    def broken(message: Warning | str, *args: Any, **kwargs: Any) -> None:  # for capgeo's; Lightning's still shown
        if str(message).startswith(CAPGEOS):
            raise RuntimeError("the user's warning display broke")
        shown(message, *args, **kwargs)

    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="capgeo"), \
            monkeypatch.context() as patched:
        if how == "warnings are errors":
            warnings.filterwarnings("error", message="|".join(CAPGEOS))
        else:
            patched.setattr(warnings, "showwarning", broken)
        trainer = fit(tmp_path, ildr_rule=True, callbacks=[FailsEveryValidation()])
    assert trainer.global_step == 4 and all(len(values) == 2 for values in rankme_logged(trainer.log_dir).values())
    said = [record.getMessage() for record in caplog.records if record.name == "capgeo"]
    assert any(RULE_LEFT_OUT in text for text in said)
    failed = [text for text in said if "FailsEveryValidation.on_validation_epoch_end failed (RuntimeError: measure "
              "exploded); skipped, training goes on" in text]
    assert len(failed) == 1  # reported once, though it failed at both validations
    assert (Path(trainer.log_dir) / "capgeo_summary.json").is_file()
