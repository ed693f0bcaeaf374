"""LinearProbeMonitor on users' batches, with no configuration: labels and rows found in tuple ``(inputs, targets)``
batches, Hugging Face dicts (unshifted ``labels``) and (B,) class labels. Labels a linear probe can read from the
hidden state score above 0.9; labels it cannot (shuffled, or the next token of an i.i.d. sequence) stay near
chance; a batch without targets is said once, naming what was looked for."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch import Trainer
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from capgeo_callbacks import LinearProbeMonitor
from capgeo_callbacks.capture.selectors import SelectorError, select_rows

VOCAB, LENGTH, CLASSES = 16, 8, 4


class PositionwiseLM(pl.LightningModule):
    """A causal model by construction (each position's hidden state: its own token plus a little of the mean of the
    tokens before it), named as users' models are (``model.norm``); it takes tuple batches, dicts or class-label
    batches (features, one state per example)."""

    def __init__(self, inputs: str = "tokens") -> None:
        super().__init__()
        self.inputs = inputs
        self.model = nn.ModuleDict({"embed": nn.Embedding(VOCAB, 32) if inputs == "tokens" else nn.Linear(8, 32),
                                    "mlp": nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)),
                                    "norm": nn.LayerNorm(32)})
        self.head = nn.Linear(32, VOCAB)

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.model["embed"](x)
        if hidden.dim() == 3:  # + 0.2 x the causal mean of the tokens so far: every prefix its own state
            hidden = hidden + 0.2 * hidden.cumsum(dim=1) / torch.arange(1, x.shape[1] + 1)[:, None]
        return self.head(self.model["norm"](hidden + self.model["mlp"](hidden)))

    def step(self, batch: Any) -> Tensor:
        x = batch["input_ids"] if isinstance(batch, dict) else batch[0]
        return self(x).float().pow(2).mean()

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        return self.step(batch)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/loss", self.step(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)  # the random model's states are what is probed


class Dicts(Dataset):
    def __init__(self, input_ids: Tensor, labels: Tensor) -> None:
        self.input_ids, self.labels = input_ids, labels

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        return {"input_ids": self.input_ids[index], "labels": self.labels[index]}


def probe_accuracy(tmp_path: Path, data: Dataset, inputs: str = "tokens", **options: Any) -> tuple[float, list[str]]:
    """The probe on ``model.norm`` after one step, and what capgeo said."""
    monitor = LinearProbeMonitor(layers="model.norm", num_rows=1024, **options)
    trainer = Trainer(max_steps=1, val_check_interval=1, limit_val_batches=4, num_sanity_val_steps=0,
                      callbacks=[monitor], logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, accelerator="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(PositionwiseLM(inputs), DataLoader(data, batch_size=64), DataLoader(data, batch_size=256))
    said = [str(w.message) for w in caught if "Monitor" in str(w.message)]
    points = next(iter(monitor.series.values()), [])
    return (points[-1][1] if points else float("nan")), said


def tokens(n: int, seed: int) -> Tensor:
    return torch.randint(0, VOCAB, (n, LENGTH), generator=torch.Generator().manual_seed(seed))


def shuffled(values: Tensor, seed: int) -> Tensor:
    return values[torch.randperm(len(values), generator=torch.Generator().manual_seed(seed))]


def test_tuple_batches_with_next_token_targets(tmp_path: Path) -> None:
    x = tokens(1024, 0)
    targets = torch.full_like(x, -100)
    targets[:, 4:] = (3 * x[:, 4:] + 1) % VOCAB  # a target at the last four positions, read off the position's token
    accuracy, said = probe_accuracy(tmp_path / "decodable", TensorDataset(x, targets))
    assert accuracy > 0.9 and not said
    accuracy, said = probe_accuracy(tmp_path / "shuffled", TensorDataset(x, shuffled(targets, 1)))
    assert accuracy < 0.2 and not said  # chance 1/16


def test_hugging_face_labels_are_read_as_the_next_position_s(tmp_path: Path) -> None:
    # labels = input_ids, the model shifts them: position t's label is the token at t + 1, which an i.i.d. sequence
    # does not hold at t (the token at t itself would score 1.0: a probe must never be handed it)
    x = tokens(1024, 2)
    accuracy, said = probe_accuracy(tmp_path / "iid", Dicts(x, x.clone()))
    assert accuracy < 0.2 and not said
    # the answer, the last three tokens, each 5 more than the token before it: position t holds labels[t + 1]
    chain = x.clone()
    for t in range(5, LENGTH):
        chain[:, t] = (chain[:, t - 1] + 5) % VOCAB
    labels = chain.clone()
    labels[:, :5] = -100
    accuracy, said = probe_accuracy(tmp_path / "chain", Dicts(chain, labels))
    assert accuracy > 0.9 and not said


def test_class_labels_give_one_pooled_row_per_example(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(3)
    labels = torch.randint(0, CLASSES, (1024,), generator=generator)
    means = 2.0 * torch.randn(CLASSES, 8, generator=generator)
    features = means[labels] + 0.5 * torch.randn(1024, 8, generator=generator)
    accuracy, said = probe_accuracy(tmp_path / "decodable", TensorDataset(features, labels), inputs="features")
    assert accuracy > 0.9 and not said
    accuracy, said = probe_accuracy(tmp_path / "shuffled", TensorDataset(features, shuffled(labels, 4)),
                                    inputs="features")
    assert accuracy < 0.4 and not said  # chance 1/4


def test_repeated_validation_inputs_are_not_memorised(tmp_path: Path) -> None:
    # 48 distinct questions, each repeated, each with its own random label: nothing to generalise, yet a probe fit
    # and scored on the same questions reads them back
    distinct = tokens(48, 5)
    answers = torch.randint(0, VOCAB, (48,), generator=torch.Generator().manual_seed(6))
    pick = torch.randint(0, 48, (1024,), generator=torch.Generator().manual_seed(7))
    x, targets = distinct[pick], torch.full((1024, LENGTH), -100)
    targets[:, -1] = answers[pick]
    accuracy, _ = probe_accuracy(tmp_path, TensorDataset(x, targets), selector="last",
                                 labels_fn=lambda batch: batch[1][:, -1])
    assert accuracy < 0.25  # chance 1/16; fit on the first half and scored on the second, 0.60 here


def test_a_batch_without_targets_is_said_once(tmp_path: Path) -> None:
    x = tokens(512, 8)
    accuracy, said = probe_accuracy(tmp_path, TensorDataset(x, x.float()))  # float "targets": no labels
    assert accuracy != accuracy  # nothing measured, training went on
    assert len(said) == 1, said
    assert "looked for a tuple (inputs, targets)" in said[0] and "labels_fn=" in said[0]


def test_targets_that_do_not_fit_the_hidden_states_are_named() -> None:
    with pytest.raises(SelectorError, match=r"batch\[1\] has shape \(2, 3\)"):
        select_rows(torch.zeros(2, 5, 4), (torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long)), "target")
