"""Same seed, same data; the training stream resumes where a checkpoint left it."""

from __future__ import annotations

import itertools
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor

from tasks import TASKS, make_datamodule


def _equal(a: dict[str, Tensor], b: dict[str, Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_same_seed_same_data(level: tuple[str, str]) -> None:
    a = make_datamodule(*level, seed=3, val_size=64, test_size=64)
    b = make_datamodule(*level, seed=3, val_size=64, test_size=64)
    assert _equal(a.train_batch(5), b.train_batch(5))
    assert _equal(a.eval_batch("val"), b.eval_batch("val"))
    assert _equal(a.eval_batch("test"), b.eval_batch("test"))
    assert not torch.equal(a.train_batch(5)["input_ids"], a.train_batch(6)["input_ids"])


def test_different_seeds_differ() -> None:
    for task in TASKS:
        a, b = make_datamodule(task, "medium", seed=0), make_datamodule(task, "medium", seed=1)
        assert not torch.equal(a.train_batch(0)["input_ids"], b.train_batch(0)["input_ids"]), task


def test_dataloader_is_the_indexed_stream() -> None:
    dm = make_datamodule("sort", "easy", batch_size=16)
    got = list(itertools.islice(iter(dm.train_dataloader()), 5))
    assert all(_equal(g, dm.train_batch(k)) for k, g in enumerate(got))
    assert dm.batches_yielded == 5
    # A new iterator (e.g. a new epoch) continues the stream rather than restarting it.
    assert _equal(next(iter(dm.train_dataloader())), dm.train_batch(5))
    val = torch.cat([b["input_ids"] for b in dm.val_dataloader()])
    assert torch.equal(val, dm.eval_batch("val")["input_ids"])  # unshuffled, complete


@settings(max_examples=15, deadline=None)
@given(consumed=st.integers(0, 50), task=st.sampled_from(TASKS))
def test_state_dict_round_trip(consumed: int, task: str) -> None:
    dm = make_datamodule(task, "easy", batch_size=8)
    stream = iter(dm.train_dataloader())
    for _ in range(consumed):
        next(stream)
    state = dm.state_dict()
    expected = next(stream)
    resumed = make_datamodule(task, "easy", batch_size=8)
    resumed.load_state_dict(state)
    assert _equal(next(iter(resumed.train_dataloader())), expected)
    fresh = make_datamodule(task, "easy", batch_size=8)
    fresh.load_state_dict({})  # a checkpoint without our keys starts at the beginning
    assert _equal(next(iter(fresh.train_dataloader())), dm.train_batch(0))


def test_set_start_batch() -> None:
    dm = make_datamodule("add", "easy", batch_size=8)
    dm.set_start_batch(42)
    stream = iter(dm.train_dataloader())
    assert _equal(next(stream), dm.train_batch(42))
    dm.set_start_batch(7)  # also mid-stream
    assert _equal(next(stream), dm.train_batch(7))
    assert dm.state_dict()["batches_consumed"] == 8


def test_ranks_draw_disjoint_slices_of_the_stream() -> None:
    dm = make_datamodule("copy", "easy", batch_size=4)
    dm.trainer = SimpleNamespace(global_rank=1, world_size=2)  # type: ignore[assignment]
    got = list(itertools.islice(iter(dm.train_dataloader()), 3))
    assert all(_equal(g, dm.train_batch(2 * k + 1)) for k, g in enumerate(got))


class _Recorder(pl.LightningModule):
    """A one-parameter model that records the first token ids of every training batch it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(200, 1)
        self.seen: list[list[int]] = []

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        self.seen.append(batch["input_ids"][:, 0].tolist())
        return self.emb(batch["input_ids"]).mean()

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        pass

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(
    max_steps: int, ckpt_path: Path | None = None, save_to: Path | None = None, every: Path | None = None
) -> list[list[int]]:
    """Fit a recorder on add/easy for max_steps (resuming / saving at the end / every 2 steps)."""
    dm, model = make_datamodule("add", "easy", batch_size=8, val_size=16, test_size=16), _Recorder()
    callbacks = (
        [] if every is None else [ModelCheckpoint(every, "{step}", every_n_train_steps=2, save_top_k=-1)]
    )
    trainer = pl.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=every is not None,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        val_check_interval=2,
        limit_val_batches=1,
        num_sanity_val_steps=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, dm, ckpt_path=ckpt_path)
    if save_to is not None:
        trainer.save_checkpoint(save_to)
    return model.seen


@pytest.fixture
def quiet_lightning() -> Iterator[None]:
    """Lightning's info lines off for one test: a level left behind would hide other tests' info lines."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.mark.usefixtures("quiet_lightning")
def test_lightning_resume_continues_the_same_stream(tmp_path: Path) -> None:
    """Lightning prefetches one batch ahead; the resumed run must still train on batch k next."""
    straight = _fit(6)
    first = _fit(3, save_to=tmp_path / "a.ckpt")
    ckpt = torch.load(tmp_path / "a.ckpt", weights_only=False)
    assert ckpt["TaskDataModule"]["batches_consumed"] == 3
    second = _fit(6, ckpt_path=tmp_path / "a.ckpt")
    assert first + second == straight
    # A checkpoint taken mid-run, while Lightning holds the next batch prefetched.
    _fit(5, every=tmp_path / "every")
    mid = tmp_path / "every" / "step=2.ckpt"
    assert torch.load(mid, weights_only=False)["TaskDataModule"] == {
        "batches_consumed": 2,
        "batches_yielded": 3,
    }
    assert straight[:2] + _fit(6, ckpt_path=mid) == straight
