"""The README table of task levels, generated from :data:`tasks.TASK_PARAMS`."""

from __future__ import annotations

import zlib
from pathlib import Path

from tasks.budgets import budget
from tasks.generators import build_spec
from tasks.params import DIFFICULTIES, PARAM_DOCS, TASK_PARAMS, TASKS
from tasks.space import MIN_EVAL_QUESTIONS, eval_split_share, format_count, question_space
from tasks.splits import VAL_BUCKETS, seeded_generator
from tasks.vocab import decode

README_TABLE_PATH = Path(__file__).with_name("README_TABLE.md")


def _level_cell(task: str, difficulty: str) -> str:
    """``key=value`` pairs of a level, plus its sequence length T."""
    params = TASK_PARAMS[task][difficulty]
    spec = build_spec(task, params)
    values = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"{values} (T={spec.seq_len}, answer {spec.answer_len})"


def example_sequence(task: str, difficulty: str = "easy", seed: int = 0) -> str:
    """One decoded example sequence of a level (deterministic in ``seed``)."""
    spec = build_spec(task, TASK_PARAMS[task][difficulty])
    return decode(spec.sample(1, seeded_generator(seed, zlib.crc32(task.encode())))[0])


def _space_cell(task: str, difficulty: str) -> str:
    """The level's question space and its expected share in each evaluation split."""
    space = question_space(task, TASK_PARAMS[task][difficulty])
    return f"{format_count(space)} ({format_count(eval_split_share(space))})"


def _budget_cell(task: str, difficulty: str) -> str:
    """The level's default run: steps, batch, learning rate, size (and its negative-control mark)."""
    b = budget(task, difficulty)
    cell = f"{b.max_steps:,} steps, batch {b.batch_size}, lr {b.lr:g}, `{b.size}`"
    return cell + (" (negative control)" if b.negative_control else "")


def _escape_bars(text: str) -> str:
    """``text`` with ``|`` escaped, so that it can sit in a Markdown table cell."""
    return text.replace("|", "\\|")


def params_table() -> str:
    """Markdown table: per task, each level's parameters and an example sequence at easy."""
    lines = [
        "| task | " + " | ".join(DIFFICULTIES) + " | example (easy) |",
        "| --- | " + " | ".join("---" for _ in DIFFICULTIES) + " | --- |",
    ]
    for task in TASKS:
        cells = [_level_cell(task, d) for d in DIFFICULTIES]
        example = _escape_bars(example_sequence(task))
        lines.append(f"| `{task}` | " + " | ".join(cells) + f" | `{example}` |")
    lines += ["", "| task | " + " | ".join(f"questions: {d}" for d in DIFFICULTIES) + " |",
              "| --- | " + " | ".join("---:" for _ in DIFFICULTIES) + " |"]
    lines += [f"| `{task}` | " + " | ".join(_space_cell(task, d) for d in DIFFICULTIES) + " |" for task in TASKS]
    lines += ["", "| task | " + " | ".join(f"budget: {d}" for d in DIFFICULTIES) + " |",
              "| --- | " + " | ".join("---" for _ in DIFFICULTIES) + " |"]
    lines += [f"| `{task}` | " + " | ".join(_budget_cell(task, d) for d in DIFFICULTIES) + " |" for task in TASKS]
    lines += ["", "| task | parameter | meaning |", "| --- | --- | --- |"]
    legend = [(task, key, doc) for task in TASKS for key, doc in PARAM_DOCS[task].items()]
    lines += [f"| `{task}` | `{key}` | {_escape_bars(doc)} |" for task, key, doc in legend]
    lines += [
        "",
        "T is the length of `input_ids` (the sequence minus its last token); loss and accuracy count only"
        " the answer tokens. Questions: the number of distinct questions of the level (deduce counts its"
        f" facts as a set), then, in brackets, the {VAL_BUCKETS}% of them whose hash puts them in each"
        " evaluation split (validation and test alike; the other 80% are training questions). `train.py`"
        f" validates (and tests) on {MIN_EVAL_QUESTIONS} distinct questions drawn from their split, on every"
        " level. Budget: the default run of `train.py` (`tasks/budgets.py`): steps,"
        " batch size, peak learning rate and model size. Regenerate this file with `python -m tasks`.",
    ]
    return "\n".join(lines) + "\n"


def write_params_table(path: Path = README_TABLE_PATH) -> Path:
    """Write :func:`params_table` to ``path`` (default ``tasks/README_TABLE.md``)."""
    path.write_text(params_table())
    return path
