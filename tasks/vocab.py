"""The vocabulary shared by every task.

Layout (ids are stable, so a model trained on one task reads the same tokens on another):

- ``0``: padding (``<pad>``);
- ``1..10``: symbols ``=  +  -  *  ?  >  <  mod  ,  |``;
- ``11..138``: value tokens ``0`` .. ``127`` (decimal digits are the values 0-9; sort's larger
  alphabets and mod's residues use the same value tokens);
- ``139..164``: entity letters ``a`` .. ``z`` (deduce).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

PAD = "<pad>"
SYMBOLS: tuple[str, ...] = ("=", "+", "-", "*", "?", ">", "<", "mod", ",", "|")
NUM_VALUES = 128
LETTERS: tuple[str, ...] = tuple(chr(c) for c in range(ord("a"), ord("z") + 1))

VOCAB: tuple[str, ...] = (PAD, *SYMBOLS, *(str(v) for v in range(NUM_VALUES)), *LETTERS)
VOCAB_SIZE: int = len(VOCAB)
TOKEN_ID: dict[str, int] = {tok: i for i, tok in enumerate(VOCAB)}

PAD_ID: int = 0
EQ_ID: int = TOKEN_ID["="]
PLUS_ID: int = TOKEN_ID["+"]
MINUS_ID: int = TOKEN_ID["-"]
TIMES_ID: int = TOKEN_ID["*"]
QUERY_ID: int = TOKEN_ID["?"]
GT_ID: int = TOKEN_ID[">"]
LT_ID: int = TOKEN_ID["<"]
MOD_ID: int = TOKEN_ID["mod"]
COMMA_ID: int = TOKEN_ID[","]
BAR_ID: int = TOKEN_ID["|"]
VALUE0_ID: int = TOKEN_ID["0"]  # value v has id VALUE0_ID + v
LETTER0_ID: int = TOKEN_ID["a"]  # letter i (a=0) has id LETTER0_ID + i

assert PAD_ID == 0 and VOCAB_SIZE < 200


def decode(ids: Tensor | Iterable[int], skip_pad: bool = True) -> str:
    """Space-separated tokens of a 1-D id sequence (padding dropped unless ``skip_pad=False``)."""
    if isinstance(ids, Tensor):
        if ids.dim() != 1:
            raise ValueError(f"decode expects a 1-D sequence of ids, got shape {tuple(ids.shape)}")
        ids = ids.tolist()
    out = []
    for i in ids:
        i = int(i)
        if not 0 <= i < VOCAB_SIZE:
            raise ValueError(f"token id {i} is outside the vocabulary [0, {VOCAB_SIZE})")
        if i == PAD_ID and skip_pad:
            continue
        out.append(VOCAB[i])
    return " ".join(out)


def encode(text: str | Sequence[str]) -> list[int]:
    """Ids of a space-separated token string (or a list of tokens); the inverse of :func:`decode`."""
    tokens = text.split() if isinstance(text, str) else list(text)
    unknown = [t for t in tokens if t not in TOKEN_ID]
    if unknown:
        raise ValueError(f"unknown tokens {unknown}; the vocabulary is {', '.join(VOCAB)}")
    return [TOKEN_ID[t] for t in tokens]


def values_to_ids(values: Tensor) -> Tensor:
    """Value tensor (entries in 0..127) -> token ids."""
    return values + VALUE0_ID


def letters_to_ids(letters: Tensor) -> Tensor:
    """Letter-index tensor (entries in 0..25) -> token ids."""
    return letters + LETTER0_ID


def encode_tensor(text: str) -> Tensor:
    """Ids of a token string as a 1-D LongTensor."""
    return torch.tensor(encode(text), dtype=torch.long)
