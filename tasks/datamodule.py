"""The LightningDataModule that serves one task at one difficulty.

Training draws an endless stream of fresh batches: batch ``k`` is generated from a generator seeded
by ``(seed, k)``, so the stream is reproducible and can be resumed at any batch. Validation and test
are fixed sets of distinct examples drawn from their own hash buckets (see :mod:`tasks.splits`), so
they never meet training.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, IterableDataset

from tasks.generators import TaskSpec, build_spec
from tasks.params import resolve_params
from tasks.splits import (
    SPLIT_NAMES,
    TEST,
    TRAIN,
    TRAIN_FRACTION,
    VAL,
    VAL_BUCKETS,
    QuestionHasher,
    first_occurrences,
    oversample_count,
    seeded_generator,
)
from tasks.vocab import VOCAB_SIZE

Batch = dict[str, Tensor]

_EVAL_EMPTY_ROUNDS = 3  # stop looking for new eval examples after this many chunks found none
_EVAL_MAX_ROUNDS = 256


def _positive_int(name: str, value: object) -> int:
    """Check that ``value`` is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


class _TrainStream(IterableDataset):
    """Endless batches from the owning datamodule; each one yielded advances its counter."""

    def __init__(self, dm: TaskDataModule) -> None:
        self.dm = dm

    def __iter__(self) -> Iterator[Batch]:
        trainer = self.dm.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        self.dm._mark_origin()
        while True:
            k = self.dm._next_batch  # read each time, so set_start_batch works mid-stream too
            self.dm._next_batch = k + 1
            yield self.dm.train_batch(k * world + rank)


class _EvalSet(Dataset):
    """A fixed set of examples, indexable one example at a time (so Lightning can shard it)."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch

    def __len__(self) -> int:
        return self.batch["input_ids"].shape[0]

    def __getitem__(self, i: int) -> Batch:
        return {key: value[i] for key, value in self.batch.items()}


class TaskDataModule(pl.LightningDataModule):
    """One algorithmic task at one difficulty, generated on the fly from a seed.

    Every batch is a dict with ``input_ids`` and ``targets`` (LongTensor [B, T], the full sequence
    shifted by one) and ``answer_mask`` (BoolTensor [B, T], True where ``targets`` is an answer
    token). Validation and test hold ``val_size`` / ``test_size`` distinct examples, or all the
    distinct examples of their bucket that the search finds when the level's example space is smaller
    (e.g. ``mod`` with ``p=31`` has 31 * 31 = 961 questions, about 96 per evaluation split; every
    level of :data:`tasks.TASK_PARAMS` has at least 6,400, see :mod:`tasks.space`). They are drawn
    from the training distribution and deduplicated, so in a tiny space they are uniform over its
    questions.

    Training batch ``k`` is :meth:`train_batch` ``(k)`` (``k * world_size + rank`` under DDP, so ranks
    see different data). :meth:`state_dict` records the batches the trainer has consumed (Lightning
    fetches one ahead, which is not counted), so a run resumed from a Lightning checkpoint trains on
    exactly the batches an uninterrupted run would; :meth:`set_start_batch` moves the stream by hand.

    Args:
        task: one of :data:`tasks.TASKS`.
        difficulty: one of :data:`tasks.DIFFICULTIES`.
        seed: seeds the training stream and the choice of validation / test examples.
        batch_size: training batch size.
        val_size: number of validation examples (at most).
        test_size: number of test examples (at most).
        eval_batch_size: batch size of the validation and test loaders.
        params: overrides of the level's parameters in :data:`tasks.TASK_PARAMS`.
        shuffle_answers: permute the training answers across each batch (a negative control).

    Raises:
        ValueError: unknown task, difficulty or parameter, or a size that is not a positive integer.

    Example::

        dm = TaskDataModule("sort", "easy", seed=0)
        batch = next(iter(dm.train_dataloader()))  # input_ids [128, dm.seq_len]
    """

    def __init__(
        self,
        task: str,
        difficulty: str,
        *,
        seed: int = 0,
        batch_size: int = 128,
        val_size: int = 2048,
        test_size: int = 2048,
        eval_batch_size: int = 512,
        params: Mapping[str, Any] | None = None,
        shuffle_answers: bool = False,
    ) -> None:
        super().__init__()
        self.shuffle_answers = bool(shuffle_answers)
        self.params: dict[str, Any] = resolve_params(task, difficulty, params)
        self.spec: TaskSpec = build_spec(task, self.params)
        self.task = task
        self.difficulty = difficulty
        self.seed = int(seed)
        self.batch_size = _positive_int("batch_size", batch_size)
        self.val_size = _positive_int("val_size", val_size)
        self.test_size = _positive_int("test_size", test_size)
        self.eval_batch_size = _positive_int("eval_batch_size", eval_batch_size)
        self.seq_len: int = self.spec.seq_len
        self.vocab_size: int = VOCAB_SIZE
        self.answer_len: int = self.spec.answer_len
        self.question_len: int = self.spec.question_len
        self._hasher = QuestionHasher(task, self.spec.question_len)
        self._answer_mask = torch.arange(self.seq_len) >= self.spec.question_len  # [T]
        self._next_batch = 0
        self._origin: tuple[int, int | None] | None = None  # (stream position, trainer batches) at iter start
        self._eval_sets: dict[int, Tensor] = {}

    # ----------------------------------------------------------------- batches
    def to_batch(self, seq: Tensor) -> Batch:
        """Full sequences [B, T+1] -> the batch dict of the contract."""
        return {
            "input_ids": seq[:, :-1].contiguous(),
            "targets": seq[:, 1:].contiguous(),
            "answer_mask": self._answer_mask.expand(seq.shape[0], -1).clone(),
        }

    def _split_ids(self, seq: Tensor) -> Tensor:
        """[n] split ids (TRAIN / VAL / TEST) of full or question-only sequences."""
        return self._hasher.split(self.spec.question_key(seq))

    def _draw_train(self, n: int, g: torch.Generator) -> Tensor:
        """``n`` full sequences whose questions fall in the train split, drawn from ``g``."""
        parts, have = [], 0
        while have < n:  # oversample, then keep the train-bucket ones (almost always one round)
            cand = self.spec.sample(oversample_count(n - have, TRAIN_FRACTION), g)
            cand = cand[self._split_ids(cand) == TRAIN]
            parts.append(cand)
            have += cand.shape[0]
        return torch.cat(parts)[:n]

    def train_sequences(self, k: int, batch_size: int | None = None) -> Tensor:
        """Full sequences [B, T+1] of training batch ``k`` of the stream (pure function of seed, k).

        With ``shuffle_answers`` the answers are permuted across the batch's examples, so that no question
        predicts its answer: a negative control with the task's inputs and answer distribution and nothing
        to learn (validation keeps the true answers)."""
        seq = self._draw_train(batch_size or self.batch_size, seeded_generator(self.seed, TRAIN, k))
        if self.shuffle_answers:
            order = torch.randperm(seq.shape[0], generator=seeded_generator(self.seed, TRAIN, k, 1))
            answer = slice(self.spec.question_len + 1, None)  # the tokens after "="
            seq = torch.cat([seq[:, : answer.start], seq[order, answer]], dim=1)
        return seq

    def train_batch(self, k: int) -> Batch:
        """Training batch ``k`` of the stream, as a batch dict."""
        return self.to_batch(self.train_sequences(k))

    def eval_sequences(self, split: str) -> Tensor:
        """Full sequences of the fixed ``"val"`` or ``"test"`` set, in draw order (cached)."""
        split_id = {"val": VAL, "test": TEST}.get(split)
        if split_id is None:
            raise ValueError(f"unknown split {split!r}; valid splits: val, test")
        if split_id not in self._eval_sets:
            size = self.val_size if split_id == VAL else self.test_size
            self._eval_sets[split_id] = self._build_eval(split_id, size)
        return self._eval_sets[split_id]

    def eval_batch(self, split: str) -> Batch:
        """The whole ``"val"`` or ``"test"`` set as one batch dict (e.g. a probe set)."""
        return self.to_batch(self.eval_sequences(split))

    def _build_eval(self, split: int, size: int) -> Tensor:
        """``size`` distinct examples of ``split``; fewer if its bucket runs out of new questions.

        Candidates come in chunks from the training distribution; each chunk is filtered to the
        split's bucket and deduplicated against what was kept. The search stops once ``size`` are
        found or several chunks in a row bring nothing new (the bucket's questions are exhausted).
        """
        g = seeded_generator(self.seed, split, 0)
        chunk = max(16384, math.ceil(1.5 * size * 100 / VAL_BUCKETS))
        kept = torch.empty(0, self.seq_len + 1, dtype=torch.long)
        empty_rounds = rounds = 0
        while kept.shape[0] < size and empty_rounds < _EVAL_EMPTY_ROUNDS and rounds < _EVAL_MAX_ROUNDS:
            cand = self.spec.sample(chunk, g)
            cand = cand[self._split_ids(cand) == split]
            before = kept.shape[0]
            kept = torch.cat([kept, cand])
            kept = kept[first_occurrences(self.spec.question_key(kept))]
            empty_rounds = empty_rounds + 1 if kept.shape[0] == before else 0
            rounds += 1
        return kept[:size]

    def split_of(self, seq: Tensor) -> list[str]:
        """Split names (train / val / test) of question rows [n, question_len] (or full sequences)."""
        return [SPLIT_NAMES[int(s)] for s in self._split_ids(seq)]

    # ------------------------------------------------------------- dataloaders
    def train_dataloader(self) -> DataLoader:
        """Endless stream of training batches (already batched; it never ends an epoch)."""
        return DataLoader(_TrainStream(self), batch_size=None, num_workers=0)

    def _eval_loader(self, split: str) -> DataLoader:
        """Unshuffled loader over a fixed evaluation set."""
        return DataLoader(_EvalSet(self.eval_batch(split)), batch_size=self.eval_batch_size, shuffle=False)

    def val_dataloader(self) -> DataLoader:
        """The fixed validation set, unshuffled, in batches of ``eval_batch_size``."""
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        """The fixed test set, unshuffled, in batches of ``eval_batch_size``."""
        return self._eval_loader("test")

    # ------------------------------------------------------------------ resume
    @property
    def batches_yielded(self) -> int:
        """Training batches handed out so far (the stream position the next batch comes from)."""
        return self._next_batch

    @property
    def batches_consumed(self) -> int:
        """Training batches the trainer has actually taken, i.e. where a resumed run must continue.

        Lightning fetches one batch ahead of the training step on an endless loader, so while a
        trainer is fitting this is the stream position when iteration began plus the batches its fit
        loop has counted (``fit_loop.epoch_loop.batch_progress.total.ready``, which Lightning itself
        saves and restores); without a trainer it is :attr:`batches_yielded`.
        """
        ready = self._trainer_batches()
        if self._origin is None or ready is None or self._origin[1] is None:
            return self._next_batch
        start, ready_at_start = self._origin
        return start + ready - ready_at_start

    def _trainer_batches(self) -> int | None:
        """Training batches the attached trainer's fit loop has fetched, or None without one."""
        try:
            return int(self.trainer.fit_loop.epoch_loop.batch_progress.total.ready)  # type: ignore[union-attr]
        except AttributeError:
            return None

    def _mark_origin(self) -> None:
        """Remember the stream position and the trainer's batch count at the start of iteration."""
        self._origin = (self._next_batch, self._trainer_batches())

    def set_start_batch(self, k: int) -> None:
        """Make the training stream continue from batch ``k`` (takes effect at the next batch)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"start batch must be a non-negative integer, got {k!r}")
        self._next_batch = k
        self._mark_origin()

    def state_dict(self) -> dict[str, Any]:
        """The stream position (batches consumed), saved in Lightning checkpoints."""
        return {"batches_consumed": self.batches_consumed, "batches_yielded": self._next_batch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the stream where :meth:`state_dict` left it (missing keys mean the start)."""
        self.set_start_batch(int(state_dict.get("batches_consumed", state_dict.get("batches_yielded", 0))))
        self._origin = None


def make_datamodule(
    task: str,
    difficulty: str,
    *,
    seed: int = 0,
    batch_size: int = 128,
    val_size: int = 2048,
    test_size: int = 2048,
    eval_batch_size: int = 512,
    params: Mapping[str, Any] | None = None,
    shuffle_answers: bool = False,
) -> TaskDataModule:
    """Build the :class:`TaskDataModule` of ``task`` at ``difficulty`` (see its docstring)."""
    return TaskDataModule(
        task,
        difficulty,
        seed=seed,
        batch_size=batch_size,
        val_size=val_size,
        test_size=test_size,
        eval_batch_size=eval_batch_size,
        params=params,
        shuffle_answers=shuffle_answers,
    )
