"""The training budget of each level: steps, batch size and learning rate for the smallest model.

``BUDGETS`` is the one place a level's default run is defined (``train.py`` reads it). The values are
calibrated by measurement on a 2-core CPU with the ``xs`` model (README, "Calibration"): ``easy`` is
acquired quickly, ``hard`` late (after the first 20% of its budget, on at least 2 of 3 seeds).
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks.params import DIFFICULTIES, TASKS, check_choice


@dataclass(frozen=True)
class Budget:
    """A level's default training run.

    Attributes:
        max_steps: optimizer steps; the cosine schedule and the evaluation schedule span them.
        batch_size: training batch size.
        lr: peak AdamW learning rate.
        warmup_steps: linear warm-up (capped at a tenth of ``max_steps`` by ``train.py``).
        weight_decay: AdamW weight decay on matrices.
        size: the model size the level is calibrated for (``train.py``'s default ``--size``).
        negative_control: why no size learns the level within its budget, if it is kept as a named
            negative control (a test of false alarms); ``None`` for a level that is learned.
    """

    max_steps: int
    batch_size: int = 64
    lr: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.1
    size: str = "xs"
    negative_control: str | None = None


_EASY = Budget(max_steps=3000)
_MEDIUM = Budget(max_steps=6000)
_HARD = Budget(max_steps=12000)

BUDGETS: dict[str, dict[str, Budget]] = {task: {"easy": _EASY, "medium": _MEDIUM, "hard": _HARD} for task in TASKS}
BUDGETS["mod"]["hard"] = Budget(max_steps=15000)
BUDGETS["sort"]["hard"] = Budget(max_steps=6000)
# Selective copying is learned in ~500 steps at any length tried.
BUDGETS["copy"]["hard"] = Budget(max_steps=3000)
# The longest hard sequences (T = 45-64) cost 0.15-0.19 s a step on one core.
BUDGETS["reverse"]["hard"] = Budget(max_steps=8000)
BUDGETS["deduce"]["hard"] = Budget(max_steps=8000)
BUDGETS["compare"]["hard"] = Budget(max_steps=10000)
# One stated fact over 26 letters: a long plateau at chance, then acquisition near step 2,100.
BUDGETS["deduce"]["easy"] = Budget(max_steps=5000)


def budget(task: str, difficulty: str) -> Budget:
    """The default run of ``task`` at ``difficulty``."""
    check_choice("task", task, TASKS)
    check_choice("difficulty", difficulty, DIFFICULTIES)
    return BUDGETS[task][difficulty]
