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


# Hard levels: calibrated on seeds 0-2 (python -m study.phases.calibration table; docs/calibration/hard.md), on an H200
# machine; easy and medium: the first version's calibration on a 2-core CPU (docs/calibration/README.md).
BUDGETS: dict[str, dict[str, Budget]] = {
    "copy": {
        "easy": Budget(max_steps=1500),
        "medium": Budget(max_steps=1000),
        # selective copying (12 values among 12 blanks): learned late and fully on seeds 0-2 (study.phases.calibration)
        "hard": Budget(max_steps=2600),
    },
    "reverse": {
        "easy": Budget(max_steps=1000),
        "medium": Budget(max_steps=1500),
        # 16 values: seeds 0-2 differ 3x (acquired at 519, 1,511, 932); seed 0 falls back once
        # (study.phases.calibration)
        "hard": Budget(max_steps=2400),
    },
    "compare": {
        "easy": Budget(max_steps=2000),
        "medium": Budget(max_steps=2500),
        "hard": Budget(max_steps=3200),  # 4 digits: acquired on seeds 0-2, never holds 0.9 (best 0.78)
    },
    "parity": {
        # no level of parity is learned by xs within its budget: parity is the negative-control task
        "easy": Budget(max_steps=3000, negative_control=(
            "2 bits x 7 queries (each answer the XOR of two bits) stayed at chance, val/acc 0.008-0.012 and log-prob "
            "log 0.5 per token, for 1,632 steps (docs/calibration/runs.md); 3 bits x 2 was learned once, but its "
            "64 questions are too few for a 512-question validation set")),
        "medium": Budget(max_steps=3000, negative_control=(
            "3 bits x 5 queries stayed at chance for 1,008 steps; 6 bits x 2 was not acquired in 6,000 steps")),
        "hard": Budget(max_steps=1500, negative_control=(
            "12 bits x 2 queries ended 12,000 steps at val/acc 0.23 (chance 0.25; first version, docs/full-budget)")),
    },
    "add": {
        "easy": Budget(max_steps=4000),
        "medium": Budget(max_steps=4000),
        "hard": Budget(max_steps=2600),  # 8 digits: seed 0 learned fully, seed 1 falls back, seed 2 never learns
    },
    "mod": {
        "easy": Budget(max_steps=6000),
        "medium": Budget(max_steps=8000),
        "hard": Budget(max_steps=3000, negative_control=(
            "x * y mod 97 is not learned by xs: val/acc 0.18 after 10,000 steps (seed 0) and 0.29 after 15,000 "
            "(seed 1; chance 0.01), never crossing 0.5 (docs/calibration/explore.jsonl); kept short as a control")),
    },
    "sort": {
        "easy": Budget(max_steps=1000),
        "medium": Budget(max_steps=2000),
        # the main command; 16 values of 32: learned late and fully on seeds 0-2 (study.phases.calibration)
        "hard": Budget(max_steps=2800),
    },
    "mul": {
        "easy": Budget(max_steps=6000),  # 3 x 1 digits: acquired at step 1008 (seed 0, 17%)
        "medium": Budget(max_steps=2500),  # 5 x 1: at 880 (seed 0: 35% of 2,500)
        "hard": Budget(max_steps=2500),  # 8 x 1: learned late and fully on seeds 0-2 (study.phases.calibration)
    },
    "deduce": {
        "easy": Budget(max_steps=5000),
        "medium": Budget(max_steps=4000),
        "hard": Budget(
            max_steps=2500,
            negative_control=(
                "one transitive step (a > b , b > c | a ? c) is beyond xs: chain 3, hops 2, 4 queries stayed at "
                "chance (val/acc 0.068, chance 0.0625) for all 2,500 steps; the former levels (chains of 5 and 8 "
                "with distractors) were not acquired in 6,000 steps either (docs/calibration/runs.md, README)"
            ),
        ),
    },
}


def budget(task: str, difficulty: str) -> Budget:
    """The default run of ``task`` at ``difficulty``."""
    check_choice("task", task, TASKS)
    check_choice("difficulty", difficulty, DIFFICULTIES)
    return BUDGETS[task][difficulty]
