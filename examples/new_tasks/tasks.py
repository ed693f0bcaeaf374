"""Three task families capgeo's own tasks do not contain, as LightningDataModules a user could have written.

- ``recall``: associative recall. Six key-value pairs, a query key; the answer is its value
  (``k1 v1 .. k6 v6 ? k -> v``).
- ``dyck``: bracket matching. A prefix of 16 brackets of 3 types, nested 4 deep at its end; the answer is the 4
  closing brackets that balance it, innermost first. Not learned late at the sizes tried (PILOTS.md): it climbs
  from the first hundred steps and saturates slowly, so no budget makes it both late and learned.
- ``division``: modular division. ``a / b = c`` with c = a * b^-1 mod 29 (b != 0). capgeo's ``mod`` task adds,
  subtracts and multiplies two residues; it never divides.
- ``sum3``: a three-term modular sum, ``a b c = (a + b + c) mod 7``; the validation set is all 343 questions.

Every example is a question and an answer; a batch is ``(inputs, targets)``: the whole sequence but its last
token, and the next token at each position, -100 on the question. ``control=True`` permutes the answers across
the examples of each batch (and of the validation set), so nothing is learnable: the shuffled-answer control.
Training batches are drawn fresh at each step from a generator seeded by (seed, step), so a run resumed from a
checkpoint sees the batches an unbroken run would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from examples.new_tasks.model import IGNORE

Generator = torch.Generator


class QuestionAnswerData(pl.LightningDataModule):
    """Questions and answers drawn by :meth:`sample`; subclasses set ``vocab``, ``question_length`` and
    ``answer_length``."""

    vocab: ClassVar[int]
    question_length: ClassVar[int]
    answer_length: ClassVar[int]

    def __init__(self, seed: int = 0, control: bool = False, batch_size: int = 64, validation: int = 512) -> None:
        super().__init__()
        self.seed, self.control, self.batch_size, self.validation = seed, control, batch_size, validation

    @classmethod
    def length(cls) -> int:
        """Tokens the model reads: the question and the answer but its last token."""
        return cls.question_length + cls.answer_length - 1

    def sample(self, examples: int, generator: Generator, distinct: bool = False) -> tuple[Tensor, Tensor]:
        """``examples`` questions (N, question_length) and their answers (N, answer_length); ``distinct``: no
        question twice (the validation set; a family whose questions are too many to repeat may ignore it)."""
        raise NotImplementedError

    def batch(self, examples: int, generator: Generator, distinct: bool = False) -> tuple[Tensor, Tensor]:
        question, answer = self.sample(examples, generator, distinct)
        if self.control:
            answer = answer[torch.randperm(answer.shape[0], generator=generator)]
        sequence = torch.cat([question, answer], dim=1)
        targets = sequence[:, 1:].clone()
        targets[:, : self.question_length - 1] = IGNORE
        return sequence[:, :-1], targets

    def train_dataloader(self) -> DataLoader:
        start = self.trainer.global_step if self.trainer is not None else 0  # restored before this is called
        return DataLoader(_Stream(self, start), batch_size=None)

    def val_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(1_000_003 * self.seed + 7)
        inputs, targets = self.batch(self.validation, generator, distinct=True)
        return DataLoader(list(zip(inputs.split(256), targets.split(256), strict=True)), batch_size=None)


class _Stream(IterableDataset):
    def __init__(self, data: QuestionAnswerData, start: int) -> None:
        self.data, self.start = data, start

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        step = self.start
        while True:
            generator = torch.Generator().manual_seed(1_000_003 * self.data.seed + 10_007 + step)
            yield self.data.batch(self.data.batch_size, generator)
            step += 1


class Recall(QuestionAnswerData):
    """``k1 v1 .. kn vn ? k -> v``: distinct keys 0..15, values 16..31 (repeats allowed), ``?`` is 32."""

    pairs, keys, values = 6, 16, 16
    vocab = keys + values + 1
    question_length = 2 * pairs + 2
    answer_length = 1

    def sample(self, examples: int, generator: Generator, distinct: bool = False) -> tuple[Tensor, Tensor]:
        keys = torch.rand(examples, self.keys, generator=generator).argsort(dim=1)[:, : self.pairs]
        values = self.keys + torch.randint(0, self.values, (examples, self.pairs), generator=generator)
        asked = torch.randint(0, self.pairs, (examples,), generator=generator)
        rows = torch.arange(examples)
        query = torch.stack([torch.full((examples,), self.vocab - 1), keys[rows, asked]], dim=1)
        return torch.cat([torch.stack([keys, values], dim=2).flatten(1), query], dim=1), values[rows, asked, None]


class Dyck(QuestionAnswerData):
    """``b_1 .. b_16 = c_1 .. c_4``: a random walk of 16 brackets (types 0..2 open, 3..5 close) that stays
    balanced and ends 4 deep; the answer closes the 4 open brackets, innermost first. ``=`` is 6."""

    types, prefix, depth = 3, 16, 4
    vocab = 2 * types + 1
    question_length = prefix + 1
    answer_length = depth

    def sample(self, examples: int, generator: Generator, distinct: bool = False) -> tuple[Tensor, Tensor]:
        rows = torch.arange(examples)
        stack = torch.zeros(examples, self.prefix + 1, dtype=torch.long)  # open types, bottom first
        height = torch.zeros(examples, dtype=torch.long)
        tokens = []
        for position in range(self.prefix):
            left = self.prefix - position - 1  # brackets after this one
            can_open = height + 1 - self.depth <= left
            can_close = (height > 0) & (self.depth - (height - 1) <= left)
            opens = can_open & (~can_close | (torch.rand(examples, generator=generator) < 0.5))
            kind = torch.randint(0, self.types, (examples,), generator=generator)
            top = stack[rows, (height - 1).clamp(min=0)]
            tokens.append(torch.where(opens, kind, self.types + top))
            stack[rows, height] = torch.where(opens, kind, stack[rows, height])
            height = height + torch.where(opens, 1, -1)
        closers = torch.stack([self.types + stack[rows, height - 1 - i] for i in range(self.depth)], dim=1)
        question = torch.cat([torch.stack(tokens, dim=1), torch.full((examples, 1), self.vocab - 1)], dim=1)
        return question, closers


class Division(QuestionAnswerData):
    """``a / b = c`` with c = a * b^(p-2) mod p (Fermat's inverse), p = 29, b != 0; tokens 0..28 are residues,
    29 is ``/`` and 30 is ``=``. The validation questions are distinct (812 exist), so the two halves a probe
    fits and scores share none."""

    p = 29
    vocab = p + 2
    question_length = 4
    answer_length = 1

    def sample(self, examples: int, generator: Generator, distinct: bool = False) -> tuple[Tensor, Tensor]:
        if distinct:
            pairs = torch.randperm(self.p * (self.p - 1), generator=generator)[:examples]
            a, b = pairs // (self.p - 1), 1 + pairs % (self.p - 1)
        else:
            a = torch.randint(0, self.p, (examples,), generator=generator)
            b = torch.randint(1, self.p, (examples,), generator=generator)
        inverse = torch.tensor([pow(value, self.p - 2, self.p) if value else 0 for value in range(self.p)])
        question = torch.stack([a, torch.full_like(a, self.p), b, torch.full_like(a, self.p + 1)], dim=1)
        return question, ((a * inverse[b]) % self.p)[:, None]


class Sum3(QuestionAnswerData):
    """``a b c = s`` with s = (a + b + c) mod 7; tokens 0..6 are residues, 7 is ``=``. Only 343 questions exist:
    the validation set is all of them (in a random order), so no question repeats between a probe's halves."""

    p, terms = 7, 3
    vocab = p + 1
    question_length = terms + 1
    answer_length = 1

    def sample(self, examples: int, generator: Generator, distinct: bool = False) -> tuple[Tensor, Tensor]:
        if distinct:
            index = torch.randperm(self.p**self.terms, generator=generator)[:examples]
            terms = torch.stack([index // self.p**i % self.p for i in range(self.terms)], dim=1)
        else:
            terms = torch.randint(0, self.p, (examples, self.terms), generator=generator)
        question = torch.cat([terms, torch.full((terms.shape[0], 1), self.p)], dim=1)
        return question, terms.sum(dim=1, keepdim=True) % self.p


FAMILIES: dict[str, type[QuestionAnswerData]] = {"recall": Recall, "dyck": Dyck, "division": Division, "sum3": Sum3}
