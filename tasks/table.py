"""The README table of task levels, generated from :data:`tasks.TASK_PARAMS`."""

from __future__ import annotations

import zlib
from pathlib import Path

from tasks.generators import build_spec
from tasks.params import DIFFICULTIES, PARAM_DOCS, TASK_PARAMS, TASKS
from tasks.splits import seeded_generator
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
    lines += ["", "| task | parameter | meaning |", "| --- | --- | --- |"]
    legend = [(task, key, doc) for task in TASKS for key, doc in PARAM_DOCS[task].items()]
    lines += [f"| `{task}` | `{key}` | {_escape_bars(doc)} |" for task, key, doc in legend]
    lines += [
        "",
        "T is the length of `input_ids` (the sequence minus its last token); loss and accuracy count only"
        " the answer tokens. Regenerate this file with `python -m tasks`.",
    ]
    return "\n".join(lines) + "\n"


def write_params_table(path: Path = README_TABLE_PATH) -> Path:
    """Write :func:`params_table` to ``path`` (default ``tasks/README_TABLE.md``)."""
    path.write_text(params_table())
    return path
