"""Token selectors on real models: padding-aware ``last``/``mean`` on a Hugging Face GPT-2, spatial ``mean`` on a
CNN watched by glob through RankMeMonitor, the answer selectors on a hand-built answer mask, and the targets at the
rows each selector takes (ILDR's classes)."""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch import Trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from capgeo_callbacks import RankMeMonitor
from capgeo_callbacks.capture.batches import TargetsNotFound, find_targets
from capgeo_callbacks.capture.selectors import ANSWER_SELECTORS, row_targets, select_rows
from tests.callbacks.conftest import reference_rankme

LENGTHS = [5, 3, 7, 1]  # real tokens per sequence; padded to 7


def padded(ids: list[torch.Tensor], side: str, pad: int = 0) -> dict[str, torch.Tensor]:
    """A batch of ``ids`` padded on ``side``, with its attention mask and the position ids that give each real
    token the position it has unpadded (what ``generate`` does for left padding)."""
    width = max(len(seq) for seq in ids)
    rows, masks = [], []
    for seq in ids:
        fill = torch.full((width - len(seq),), pad, dtype=seq.dtype)
        ones, zeros = torch.ones(len(seq), dtype=torch.long), torch.zeros(width - len(seq), dtype=torch.long)
        rows.append(torch.cat([seq, fill]) if side == "right" else torch.cat([fill, seq]))
        masks.append(torch.cat([ones, zeros]) if side == "right" else torch.cat([zeros, ones]))
    mask = torch.stack(masks)
    return {"input_ids": torch.stack(rows), "attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)}


@pytest.fixture(scope="module")
def gpt2_states() -> tuple[list[torch.Tensor], dict[str, tuple[dict, tuple]]]:
    """Hidden states of a tiny random GPT-2 on the same sequences unpadded, right-padded and left-padded."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2Model(transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50,
                                                           n_positions=32)).eval()
    ids = [torch.randint(1, 50, (n,), generator=torch.Generator().manual_seed(n)) for n in LENGTHS]
    with torch.no_grad():
        alone = [model(input_ids=seq[None], output_hidden_states=True).hidden_states for seq in ids]
        runs = {}
        for side in ("right", "left"):
            batch = padded(ids, side)
            runs[side] = (batch, model(**batch, output_hidden_states=True).hidden_states)
    return alone, runs


def test_last_is_the_same_rows_whichever_side_is_padded(gpt2_states) -> None:
    alone, runs = gpt2_states
    for layer in range(3):  # embeddings, block 0, block 1 (after the final norm)
        expected = torch.stack([states[layer][0, -1] for states in alone])  # each sequence unpadded, last token
        for side, (batch, hidden) in runs.items():
            rows = select_rows(hidden[layer], batch, "last")
            torch.testing.assert_close(rows, expected, atol=1e-5, rtol=1e-5, msg=f"{side}-padded, layer {layer}")
    # without the mask, position -1 is a pad token for every shorter sequence: what the mask is for
    batch, hidden = runs["right"]
    assert not torch.allclose(select_rows(hidden[2], {"input_ids": batch["input_ids"]}, "last"), expected)


def test_mean_and_all_ignore_padding(gpt2_states) -> None:
    alone, runs = gpt2_states
    for layer in range(3):
        expected_mean = torch.stack([states[layer][0].mean(dim=0) for states in alone])
        expected_all = torch.cat([states[layer][0] for states in alone])
        for side, (batch, hidden) in runs.items():
            torch.testing.assert_close(select_rows(hidden[layer], batch, "mean"), expected_mean, atol=1e-5,
                                       rtol=1e-5, msg=f"mean, {side}-padded, layer {layer}")
            rows = select_rows(hidden[layer], batch, "all")
            assert rows.shape == (sum(LENGTHS), 32)
            if side == "right":  # the real positions in order, sequence after sequence
                torch.testing.assert_close(rows, expected_all, atol=1e-5, rtol=1e-5)


def test_selectors_skip_a_sequence_with_no_real_token() -> None:
    hidden = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    batch = {"attention_mask": torch.tensor([[1, 1, 0], [0, 0, 0]])}
    torch.testing.assert_close(select_rows(hidden, batch, "last"), hidden[0, 1][None])
    torch.testing.assert_close(select_rows(hidden, batch, "mean"), hidden[0, :2].mean(0)[None])
    torch.testing.assert_close(select_rows(hidden, batch, "all"), hidden[0, :2])


def test_mean_ignores_non_finite_states_at_pad_positions() -> None:
    """Some attention kernels leave garbage (NaN) at fully masked (pad) positions; real rows must not see it."""
    hidden = torch.randn(2, 3, 4)
    hidden[1, 0] = float("nan")  # a left pad
    batch = {"attention_mask": torch.tensor([[1, 1, 1], [0, 1, 1]])}
    assert torch.isfinite(select_rows(hidden, batch, "last")).all()
    assert torch.isfinite(select_rows(hidden, batch, "all")).all()
    torch.testing.assert_close(select_rows(hidden, batch, "mean")[1], hidden[1, 1:].mean(0))


def test_answer_selectors_on_a_hand_built_mask() -> None:
    hidden = torch.arange(3 * 5 * 2, dtype=torch.float32).reshape(3, 5, 2)  # (B, T, D)
    mask = torch.tensor([[0, 0, 1, 1, 0],   # answer predicted from positions 2 and 3
                         [0, 0, 0, 0, 1],   # from position 4 only
                         [0, 0, 0, 0, 0]],  # no answer: no row
                        dtype=torch.bool)
    batch = {"answer_mask": mask}
    h = hidden.numpy()
    first = select_rows(hidden, batch, "first_answer")
    np.testing.assert_array_equal(first.numpy(), np.stack([h[0, 2], h[1, 4]]))
    question = select_rows(hidden, batch, "question_mean")  # the positions up to and including the first answer
    np.testing.assert_allclose(question.numpy(), np.stack([h[0, :3].mean(0), h[1, :5].mean(0)]), rtol=1e-6)
    answer = select_rows(hidden, batch, "answer")
    np.testing.assert_array_equal(answer.numpy(), np.stack([h[0, 2], h[0, 3], h[1, 4]]))


class TinyCNN(pl.LightningModule):
    """Convolutions in ``features`` (B, C, H, W), then global pooling and a linear classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 12, 3, padding=1))
        self.head = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return nn.functional.cross_entropy(self(batch[0]), batch[1])

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("val_acc", (self(batch[0]).argmax(-1) == batch[1]).float().mean(), batch_size=len(batch[1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def images(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=generator), torch.randint(0, 3, (n,), generator=generator))


def test_cnn_feature_maps_pooled_over_space(tmp_path) -> None:
    torch.manual_seed(0)
    monitor = RankMeMonitor(layers="features.*", selector="mean", num_rows=40)
    model = TinyCNN()
    trainer = Trainer(max_steps=6, val_check_interval=3, check_val_every_n_epoch=None, accelerator="cpu", logger=False,
                      callbacks=[monitor], enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, num_sanity_val_steps=0, default_root_dir=tmp_path)
    val = images(64, seed=1)
    trainer.fit(model, DataLoader(images(64, seed=0), batch_size=16), DataLoader(val, batch_size=16))
    assert monitor.layer_names == ["features.0", "features.1", "features.2"]
    # ILDR on the same pooled rows, classed by the (inputs, targets) batches' label of each image
    assert list(monitor.series) == [f"{prefix}/features.{i}" for prefix in ("rankme", "ildr") for i in range(3)]
    assert all([p[0] for p in points] == [3, 6] for points in monitor.series.values())
    assert monitor.rows == {tag: 40 for tag in monitor.series}
    # the last point is the trained model on the first 40 validation images, each feature map averaged over H, W
    x = val.tensors[0][:40]
    with torch.no_grad():
        for i, layer in enumerate(model.eval().features):
            x = layer(x)  # (40, C, 8, 8)
            pooled = x.mean(dim=(2, 3)).numpy()  # (40, C)
            assert monitor.series[f"rankme/features.{i}"][-1][1] == pytest.approx(reference_rankme(pooled), rel=1e-6)


def where_from(batch: int, seq: int) -> torch.Tensor:
    """(B, T, 2) hidden states that hold their own (example, position): a selected row says where it came from."""
    index = torch.stack(torch.meshgrid(torch.arange(batch), torch.arange(seq), indexing="ij"), dim=-1)
    return index.to(torch.float64)


@pytest.mark.parametrize("selector", ["target", "answer", "first_answer", "last", "all"])
def test_row_targets_are_the_targets_at_the_rows_each_selector_takes(selector: str) -> None:
    """ILDR's classes: the batch's target at each row, row for row (capgeo's answer mask, or a per-position target
    where every real position has one, the last one dropped by the attention mask)."""
    generator = torch.Generator().manual_seed(0)
    targets = torch.randint(0, 9, (4, 6), generator=generator)
    attention = torch.ones(4, 6, dtype=torch.long)
    attention[1, 4:] = attention[3, 5:] = 0
    if selector in ANSWER_SELECTORS or selector == "target":
        mask = torch.zeros(4, 6, dtype=torch.bool)
        mask[:, 3:5] = True
        mask[2] = False  # an example without an answer
        batch = {"input_ids": targets, "targets": targets, "answer_mask": mask}
    else:  # Hugging Face's unshifted labels give the last real position none; aligned targets give every one
        with pytest.raises(TargetsNotFound, match="have no target"):
            row_targets({"input_ids": targets, "labels": targets, "attention_mask": attention}, selector)
        batch = {"input_ids": targets, "targets": targets, "attention_mask": attention}
    rows = select_rows(where_from(4, 6), batch, selector)
    found = find_targets(batch).values
    expected = found[rows[:, 0].long(), rows[:, 1].long()]
    assert len(rows) > 0 and torch.equal(row_targets(batch, selector), expected)


def test_row_targets_of_one_label_per_example_and_where_rows_have_none() -> None:
    x, y = torch.randint(0, 9, (5, 4)), torch.randint(0, 3, (5,))
    assert torch.equal(row_targets((x, y), "mean"), y) and torch.equal(row_targets((x, y), "last"), y)
    with pytest.raises(TargetsNotFound, match="'all' takes have no target of their own"):
        row_targets((x, y), "all")  # several rows of each example
    dense = (x, torch.randint(0, 9, (5, 4)))
    with pytest.raises(TargetsNotFound, match="'mean' takes have no target of their own"):
        row_targets(dense, "mean")  # pooled over positions
    with pytest.raises(TargetsNotFound, match="callable selector"):
        row_targets(dense, lambda hidden, batch: hidden[:, 0])
    with pytest.raises(TargetsNotFound, match="no targets found"):
        row_targets(x, "mean")
