"""capgeo's callbacks configured from YAML through ``LightningCLI`` (jsonargparse), then fit for a few steps."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import yaml
from torch import nn
from torch.utils.data import DataLoader

pytest.importorskip("jsonargparse")
from lightning.pytorch.cli import LightningCLI  # noqa: E402

from capgeo_callbacks import (  # noqa: E402
    DetectionSettings,
    EvaluationSchedule,
    LinearProbeMonitor,
    PrecursorDetector,
    RankMeMonitor,
)
from capgeo_callbacks.capture.batches import answer_cross_entropy  # noqa: E402

CONFIG = Path(__file__).parents[1] / "fixtures" / "capgeo_cli.yaml"
DIGITS = 4  # "d1 d2 d3 d4 SEP d1 d2 d3 d4": copy the digits


class TinyLM(pl.LightningModule):
    """A residual MLP over token embeddings (no attention; enough for hidden states to measure)."""

    def __init__(self, vocab: int = 12, width: int = 32, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.randn(2 * DIGITS + 1, width) * 0.1)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(2))
        self.norm_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids) + self.position[: input_ids.shape[1]]  # (B, T, D)
        x = x + x.cumsum(dim=1) / torch.arange(1, x.shape[1] + 1, device=x.device)[:, None]  # causal mixing
        for block in self.blocks:
            x = x + block(x)
        return self.head(self.norm_f(x))  # (B, T, V)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return answer_cross_entropy(self(batch["input_ids"]), batch)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        logits, mask = self(batch["input_ids"]), batch["answer_mask"]
        right = ((logits.argmax(-1) == batch["targets"]) | ~mask).all(dim=1).float().mean()
        logprob = logits.log_softmax(-1).gather(-1, batch["targets"][..., None])[..., 0][mask].mean()
        self.log("val/acc", right, batch_size=len(mask))
        self.log("val/logprob", logprob, batch_size=len(mask))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def copy_rows(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    digits = torch.randint(0, 10, (n, DIGITS), generator=torch.Generator().manual_seed(seed))
    ids = torch.cat([digits, torch.full((n, 1), 10), digits], dim=1)
    targets = torch.cat([ids[:, 1:], torch.zeros(n, 1, dtype=ids.dtype)], dim=1)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, DIGITS:-1] = True
    return [{"input_ids": ids[i], "targets": targets[i], "answer_mask": mask[i]} for i in range(n)]


class CopyData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(copy_rows(1024, seed=0), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(copy_rows(128, seed=1), batch_size=64)


@pytest.fixture(autouse=True)
def _no_pytest_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["cli"])  # LightningCLI warns when sys.argv holds pytest's arguments


def cli_with(tmp_path: Path, config: dict | None = None, subcommand: str | None = "fit") -> LightningCLI:
    """LightningCLI on the fixture YAML (or ``config``), fit unless ``subcommand`` is None."""
    path = CONFIG
    if config is not None:
        path = tmp_path / "config_in.yaml"
        path.write_text(yaml.safe_dump(config))
    args = ["--config", str(path), f"--trainer.default_root_dir={tmp_path}"]
    return LightningCLI(TinyLM, CopyData, args=[subcommand, *args] if subcommand else args,
                        run=subcommand is not None, save_config_kwargs={"overwrite": True})


def digit_labels(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The first digit of each example (one label per row of the ``mean`` selector)."""
    return batch["input_ids"][:, 0]


def last_position(hidden: torch.Tensor, batch: object) -> torch.Tensor:
    return hidden[:, -1]


def record_alert(alert: object) -> None:
    print(alert)


def test_callbacks_from_yaml_are_built_and_measure(tmp_path: Path) -> None:
    cli = cli_with(tmp_path)
    callbacks = {type(cb): cb for cb in cli.trainer.callbacks}
    rankme, probes = callbacks[RankMeMonitor], callbacks[LinearProbeMonitor]
    detector, schedule = callbacks[PrecursorDetector], callbacks[EvaluationSchedule]

    # built with the YAML's arguments
    assert rankme.layer_patterns == ["blocks.*", "norm_f"] and rankme.selector == "first_answer"
    assert rankme.num_rows == 64
    assert probes.layer_patterns == ["norm_f"] and probes.num_rows == 128 and probes.ridge == 0.01
    assert isinstance(detector.settings, DetectionSettings)
    assert detector.settings.min_drop == 0.4 and detector.settings.smoothing == 1
    assert detector.settings.patience == DetectionSettings().patience  # the others keep their defaults
    assert dict(detector.settings.measure_transitions) == {"rankme/": "collapse", "probe_acc/": "crossing"}
    assert detector.run_info == {"task": "copy", "note": "from YAML", "max_steps": cli.trainer.max_steps}
    assert schedule.points == 8 and schedule.schedule == "linear"
    assert detector.session.budget is not None and not detector.session.budget.thins  # "measure", from the YAML

    # and they measured at the schedule's steps
    steps = [0, 4, 8, 12, 16, 20, 24]
    assert schedule.steps == steps
    assert list(rankme.series) == [f"{prefix}/{layer}" for prefix in ("rankme", "ildr")
                                   for layer in ("blocks.0", "blocks.1", "norm_f")]
    for points in rankme.series.values():
        assert [p[0] for p in points] == steps
    assert [p[0] for p in probes.series["probe_acc/norm_f"]] == steps
    assert rankme.rows == {tag: 64 for tag in rankme.series}
    assert probes.rows == {"probe_acc/norm_f": 128}  # 128 examples x 4 answer positions, the first 128

    summary = json.loads((tmp_path / "capgeo_summary.json").read_text())
    assert summary["settings"]["min_drop"] == 0.4
    assert summary["task"] == "copy"
    assert summary["selectors"] == {"rankme": "first_answer", "probe_acc": "target"}  # the probes' default
    assert [p[0] for p in summary["series"]["acc"]] == steps
    assert set(summary["layers"]) == {"blocks.0", "blocks.1", "norm_f"}

    # the config LightningCLI saved reproduces the same callbacks
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    names = [cb["class_path"] for cb in saved["trainer"]["callbacks"]]
    assert names == ["capgeo_callbacks.RankMeMonitor", "capgeo_callbacks.LinearProbeMonitor",
                     "capgeo_callbacks.PrecursorDetector", "capgeo_callbacks.EvaluationSchedule"]
    assert saved["trainer"]["callbacks"][2]["init_args"]["settings"]["min_drop"] == 0.4
    assert saved["trainer"]["callbacks"][2]["init_args"]["overhead_budget"] == "measure"


def test_callables_by_import_path(tmp_path: Path) -> None:
    """Callable arguments are given as dotted import paths; jsonargparse checks a function's return annotation
    against the hint, so ``labels_fn`` (``Callable[[Any], Tensor]``) needs a function annotated ``-> Tensor``."""
    config = yaml.safe_load(CONFIG.read_text())
    callbacks = config["trainer"]["callbacks"]
    callbacks[1]["init_args"].update(selector="mean", labels_fn="tests.callbacks.test_lightning_cli.digit_labels")
    callbacks[2]["init_args"]["on_alert"] = "tests.callbacks.test_lightning_cli.record_alert"
    cli = cli_with(tmp_path, config, subcommand=None)
    built = {type(cb): cb for cb in cli.trainer.callbacks}
    assert built[LinearProbeMonitor].labels_fn is digit_labels
    assert built[PrecursorDetector].on_alert is record_alert


def test_callable_selector_by_import_path(tmp_path: Path) -> None:
    config = yaml.safe_load(CONFIG.read_text())
    config["trainer"]["callbacks"][0]["init_args"]["selector"] = "tests.callbacks.test_lightning_cli.last_position"
    cli = cli_with(tmp_path, config, subcommand=None)
    assert next(cb for cb in cli.trainer.callbacks if isinstance(cb, RankMeMonitor)).selector is last_position


def test_bad_value_in_yaml_fails_before_training(tmp_path: Path) -> None:
    """A selector capgeo does not know passes jsonargparse (``Selector`` admits any string) and is rejected by
    the callback's own check, naming the valid ones."""
    config = yaml.safe_load(CONFIG.read_text())
    config["trainer"]["callbacks"][0]["init_args"]["selector"] = "final"
    with pytest.raises(ValueError, match="unknown token selector 'final'; valid: target, answer, first_answer"):
        cli_with(tmp_path, config)
