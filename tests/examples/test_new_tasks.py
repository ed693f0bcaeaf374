"""examples/new_tasks: the task families (questions, answers, controls, a resumable stream) and the runner the
registered test will use (the README's callbacks, a run folder with capgeo_summary.json and run.json, resumed
from its last checkpoint with the batches an unbroken run sees)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from examples.new_tasks.model import IGNORE
from examples.new_tasks.run import SETTINGS, readme_callbacks, run
from examples.new_tasks.tasks import FAMILIES, Dyck, _Stream
from tests.examples.test_readme_on_your_own_model import readme_block


def describe(callback: Any) -> tuple:
    """What a README callback is: its class and the arguments the README gives it."""
    names = ("points", "layer_patterns", "selector", "num_rows", "every_n_evals", "monitor", "on_alert")
    rules = tuple(rule.name for rule in getattr(getattr(callback, "tracker", None), "rules", ()))
    return type(callback).__name__, tuple(getattr(callback, name, None) for name in names), rules


def test_the_runner_attaches_the_readme_callbacks_as_printed() -> None:
    namespace: dict[str, Any] = {}
    exec(readme_block(), namespace)  # noqa: S102 - the README's code
    printed = [describe(callback) for callback in namespace["trainer"].callbacks if type(callback).__module__
               .startswith("capgeo_callbacks")]
    assert [describe(callback) for callback in readme_callbacks()] == printed


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_batch_is_inputs_and_next_token_targets_on_the_answer(family: str) -> None:
    data = FAMILIES[family](seed=3)
    inputs, targets = data.batch(64, torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (64, data.length())
    assert int(inputs.min()) >= 0 and int(inputs.max()) < data.vocab
    answer = targets != IGNORE
    assert (answer.sum(dim=1) == data.answer_length).all()
    assert answer[:, -data.answer_length:].all()  # the answer is the sequence's end
    assert (targets[:, :-1][answer[:, :-1]] == inputs[:, 1:][answer[:, :-1]]).all()  # teacher forcing


def test_dyck_answers_close_every_open_bracket_innermost_first() -> None:
    question, answer = Dyck().sample(500, torch.Generator().manual_seed(5))
    for brackets, closers in zip(question[:, :-1].tolist(), answer.tolist(), strict=True):
        stack: list[int] = []
        for bracket in brackets:
            if bracket < Dyck.types:
                stack.append(bracket)
            else:
                assert stack and stack.pop() == bracket - Dyck.types
        assert [Dyck.types + kind for kind in reversed(stack)] == closers


def test_division_answers_times_the_divisor_give_the_dividend() -> None:
    data = FAMILIES["division"]()
    question, answer = data.sample(500, torch.Generator().manual_seed(1))
    assert ((answer[:, 0] * question[:, 2]) % data.p == question[:, 0]).all()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_validation_questions_are_distinct(family: str) -> None:
    inputs, targets = zip(*FAMILIES[family](seed=0).val_dataloader(), strict=True)
    questions = torch.cat(inputs)[:, : FAMILIES[family].question_length]
    assert len({tuple(row) for row in questions.tolist()}) == len(questions) == (343 if family == "sum3" else 512)


def test_sum3_answers_are_the_sum_mod_7() -> None:
    question, answer = FAMILIES["sum3"]().sample(500, torch.Generator().manual_seed(2))
    assert (question[:, :3].sum(dim=1) % 7 == answer[:, 0]).all() and (question[:, 3] == 7).all()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_control_shuffles_answers_across_examples(family: str) -> None:
    task = FAMILIES[family](seed=3).batch(512, torch.Generator().manual_seed(0))
    control = FAMILIES[family](seed=3, control=True).batch(512, torch.Generator().manual_seed(0))
    asked = FAMILIES[family].question_length
    assert torch.equal(task[0][:, :asked], control[0][:, :asked])
    moved = (task[1] != control[1]).any(dim=1).float().mean()
    assert moved > 0.8  # the rest drew an equal answer by chance
    assert sorted(task[1][:, -1].tolist()) == sorted(control[1][:, -1].tolist())  # the same answers, moved


def test_the_stream_resumes_where_it_stopped() -> None:
    data = FAMILIES["recall"](seed=2, batch_size=8)
    whole = [batch for batch, _ in zip(_Stream(data, 0), range(6), strict=False)]
    resumed = next(iter(_Stream(data, 4)))
    assert all(torch.equal(a, b) for a, b in zip(whole[4], resumed, strict=True))
    assert not torch.equal(whole[3][0], whole[4][0])


@pytest.mark.slow
def test_a_run_leaves_its_summary_and_resumes_to_the_weights_of_an_unbroken_run(tmp_path: Path) -> None:
    settings = replace(SETTINGS["division"], max_steps=12)
    whole = run("division", 5, root=tmp_path / "whole", settings=settings, checkpoint_every=6)
    part = run("division", 5, root=tmp_path / "parts", settings=replace(settings, max_steps=6), checkpoint_every=6)
    resumed = run("division", 5, root=tmp_path / "parts", settings=settings, checkpoint_every=6)
    assert part == resumed
    record = json.loads((resumed / "run.json").read_text())
    assert [p["steps"] for p in record["parts"]] == [6, 12] and record["parts"][1]["from_checkpoint"]
    assert record["cpu_seconds"] == pytest.approx(sum(p["cpu_seconds"] for p in record["parts"]))
    summary = json.loads((resumed / "capgeo_summary.json").read_text())
    assert summary["steps"] == 12 and summary["series"]["acc"][0][0] == 0
    # the budget and the warm-up were known live (a replay of the summary reads what the rules read) and the device
    assert (summary["max_steps"], summary["warmup_steps"], record["device"]) == (12, settings.warmup, "cpu")
    weights = [torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
               for folder in (whole, resumed)]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
