"""CapgeoTrainerCallback on a real ``transformers.Trainer``: a tiny random GPT-2 learning to reverse digits."""

from __future__ import annotations

import ast
import importlib
import json
import logging
import sys
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers.Trainer needs it

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

from capgeo_callbacks.detection import DetectionSettings  # noqa: E402
from capgeo_callbacks.integrations.hf import ACC_KEY, CapgeoTrainerCallback  # noqa: E402
from tests.callbacks.conftest import reference_rankme  # noqa: E402
from tests.measures.test_ildr import reference_ildr  # noqa: E402

DIGITS, SEP = 6, 10  # "d1 .. d6 SEP d6 .. d1": 13 tokens
MAX_STEPS = 40
LABELS = ["embed", "layers.0", "layers.1+final_norm"]


def reversal(n: int, seed: int) -> torch.Tensor:
    digits = torch.randint(0, 10, (n, DIGITS), generator=torch.Generator().manual_seed(seed))
    return torch.cat([digits, torch.full((n, 1), SEP), digits.flip(1)], dim=1)


class Reversal(torch.utils.data.Dataset):
    """Causal-LM examples; the loss reads only the answer (labels -100 on the question)."""

    def __init__(self, n: int, seed: int) -> None:
        self.ids = reversal(n, seed)

    def __len__(self) -> int:
        return self.ids.shape[0]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        labels = self.ids[i].clone()
        labels[: DIGITS + 1] = -100
        return {"input_ids": self.ids[i], "labels": labels}


def probe_rows(n: int = 48) -> dict[str, torch.Tensor]:
    """capgeo's convention: targets are the next tokens; answer_mask marks the positions predicting the answer."""
    ids = reversal(n, seed=123)
    targets = torch.cat([ids[:, 1:], torch.zeros(n, 1, dtype=ids.dtype)], dim=1)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, DIGITS:-1] = True  # SEP predicts the first answer digit, ..., the second-to-last the last one
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "targets": targets, "answer_mask": mask}


class LogRecorder(transformers.TrainerCallback):
    """A user callback listed after capgeo's: what it sees in ``on_log``, at which step."""

    def __init__(self) -> None:
        self.logs: list[tuple[int, dict]] = []

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        self.logs.append((state.global_step, dict(logs or {})))


def make_trainer(tmp_path: Path, callbacks: list, **settings) -> Trainer:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=32)  # dropout 0.1: RNG in use
    model = GPT2LMHeadModel(config)
    settings = {"save_strategy": "no", "max_steps": MAX_STEPS, **settings}
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], per_device_train_batch_size=16,
                             learning_rate=3e-3, logging_steps=10, seed=0, disable_tqdm=True, dataloader_num_workers=0,
                             **settings)
    return Trainer(model=model, args=args, train_dataset=Reversal(512, seed=0), callbacks=callbacks)


def train(tmp_path: Path, callbacks: list, resume: str | None = None, **settings) -> Trainer:
    trainer = make_trainer(tmp_path, callbacks, **settings)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


@pytest.mark.slow
def test_rankme_series_summary_and_no_observer_effect(tmp_path: Path) -> None:
    rows = probe_rows()
    callback = CapgeoTrainerCallback(rows, num_rows=256, points=9, run_info={"task": "reverse"},
                                     overhead_budget="measure")  # timed, every point kept
    recorder = LogRecorder()
    trainer = train(tmp_path / "with", [callback, recorder])
    steps = [0, 1, 4, 10, 16, 22, 28, 34, 40]  # evaluation_steps(40, 9)
    assert callback.steps == steps
    for label in LABELS:  # the registry's measures at their registered cadences, as on Lightning
        assert [p[0] for p in callback.series[f"rankme/{label}"]] == steps
        assert [p[0] for p in callback.series[f"probe_acc/{label}"]] == steps[::4]
    assert [p[0] for p in callback.series["weight_norm/global"]] == steps
    assert callback.rows == {f"{kind}/{label}": 256 for kind in ("rankme", "ildr", "probe_acc") for label in LABELS}
    # the Trainer's budget and warm-up (none here) reach the rules and the summary as run facts
    assert {key: callback.summary[key] for key in ("task", "max_steps", "warmup_steps")} == {
        "task": "reverse", "max_steps": 40, "warmup_steps": 0}

    # the last point is the trained model: RankMe of the same rows, recomputed here with numpy
    model = trainer.model.eval()
    with torch.no_grad():
        hidden = model(input_ids=rows["input_ids"], attention_mask=rows["attention_mask"],
                       output_hidden_states=True).hidden_states
    answers = rows["targets"][rows["answer_mask"]][:256]  # ILDR's classes: the answer token each row predicts
    for label, states in zip(LABELS, hidden, strict=True):
        z = states[rows["answer_mask"]][:256].numpy()
        assert callback.series[f"rankme/{label}"][-1][1] == pytest.approx(reference_rankme(z), rel=1e-5)
        assert callback.series[f"ildr/{label}"][-1][1] == pytest.approx(
            reference_ildr(torch.from_numpy(z), answers), rel=1e-5)
        assert [p[0] for p in callback.series[f"ildr/{label}"]] == steps

    # the Trainer's own log history holds every measurement at its step, and without any report_to integration a
    # callback after this one gets each as a log event at that step, apart from the Trainer's own logs
    logged = [entry for entry in trainer.state.log_history if ACC_KEY in entry]
    assert [entry["step"] for entry in logged] == steps
    assert [entry["rankme/embed"] for entry in logged] == [value for _, value in callback.series["rankme/embed"]]
    assert [(step, logs["rankme/embed"]) for step, logs in recorder.logs if ACC_KEY in logs] == \
        [tuple(point) for point in callback.series["rankme/embed"]]
    assert all("loss" not in logs for _, logs in recorder.logs if ACC_KEY in logs)

    summary = json.loads((tmp_path / "with" / "capgeo_summary.json").read_text())
    for key in ("verdict", "layers", "series", "settings", "rows", "selectors", "alerts", "acquisition_step"):
        assert key in summary
    assert summary["task"] == "reverse" and summary["monitor"] == ACC_KEY and summary["steps"] == MAX_STEPS
    assert list(summary["layers"]) == LABELS
    assert summary["selectors"] == {"rankme": "target", "probe_acc": "target"}  # the answer positions here
    assert [p[0] for p in summary["series"]["acc"]] == steps
    assert [p[0] for p in summary["series"]["ildr/embed"]] == steps
    assert len(summary["series"][ACC_KEY.replace("acc", "logprob")]) == len(steps)
    assert summary["parameters"] == sum(p.numel() for p in model.parameters())
    assert summary["overhead"]["setting"] == "measure" and summary["overhead"]["thinned"] == 0
    assert summary["series"]["weight_norm/global"][-1][1] == pytest.approx(
        float(torch.sqrt(sum(p.detach().double().pow(2).sum() for p in model.parameters()))), rel=1e-9)

    # the same training without the callback ends at bit-identical weights
    plain = train(tmp_path / "without", []).model
    for (name, a), (_, b) in zip(model.state_dict().items(), plain.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.slow
def test_hugging_face_labels_give_accuracy_loss_and_probes_without_configuration(tmp_path: Path) -> None:
    """Probe rows as a Hugging Face dataset gives them (``input_ids`` and unshifted ``labels``): the positions that
    predict a label are the rows, every one of them (no warning about fewer rows than asked), the probes are on,
    and the accuracy, per-token accuracy, log-prob and loss of the labelled tokens are measured."""
    examples = Reversal(48, seed=123)
    rows = {"input_ids": examples.ids, "labels": torch.stack([examples[i]["labels"] for i in range(48)])}
    callback = CapgeoTrainerCallback(rows, points=5, overhead_budget="measure")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(tmp_path, [callback])
    assert not [str(w.message) for w in caught if "CapgeoTrainerCallback" in str(w.message)]
    assert callback.selector == "target" and callback.probes and callback.num_rows == 48 * DIGITS
    assert callback.rows == {f"{kind}/{label}": 48 * DIGITS for kind in ("rankme", "ildr", "probe_acc")
                             for label in LABELS}
    record = callback.session.scalars
    assert {"val/token_acc", "val/logprob", "val/loss"} <= set(record)
    assert record["val/loss"][-1][1] == pytest.approx(-record["val/logprob"][-1][1])
    # the loss at step 0 is the initial model's own on the labelled tokens
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=32)).eval()
    with torch.no_grad():
        loss = float(model(input_ids=rows["input_ids"], labels=rows["labels"]).loss)
    assert record["val/loss"][0][1] == pytest.approx(loss, rel=1e-5)


def test_the_gradient_measures_and_the_budget_run_as_on_lightning(tmp_path: Path) -> None:
    """The registry's gradient measures, at their cadences, on the training set's first examples collated as the
    Trainer collates them, with the model's own loss; the overhead budget's record in the summary; training
    unchanged."""
    from transformers import default_data_collator

    from capgeo_callbacks.capture.measuring import measuring
    from capgeo_callbacks.measures.commutator import model_commutator

    options = {"commutator": {"every_n_evals": 1, "batch_size": 8},
               "hessian": {"every_n_evals": 2, "batch_size": 8, "num_iterations": 4}}
    callback = CapgeoTrainerCallback(probe_rows(16), points=5, measures="rankme,commutator,hessian",
                                     measure_options=options, overhead_budget="measure")
    trainer = train(tmp_path / "with", [callback], max_steps=8)
    steps = callback.steps
    assert [p[0] for p in callback.series["commutator/defect"]] == steps
    assert [p[0] for p in callback.series["hessian/eig_0"]] == steps[::2]
    work = callback.summary["overhead"]["work"]
    assert {"rankme", "CommutatorDefectMonitor", "HessianMonitor", "measuring pass", "detector"} <= set(work)
    assert work["measuring pass"]["kind"] == "fixed" and work["CommutatorDefectMonitor"]["runs"] == len(steps)

    # the last value: the trained model's defect on the first 8 training examples, halves A and B, its own loss
    examples = default_data_collator([Reversal(512, seed=0)[i] for i in range(8)])
    halves = [{key: value[part] for key, value in examples.items()} for part in (slice(0, 4), slice(4, 8))]
    model = trainer.model
    with measuring(model, grad=True):
        expected = model_commutator(model, lambda output, batch: output.loss, *halves,
                                    forward=lambda module, batch: module(**batch)).defect
    assert callback.series["commutator/defect"][-1] == [8, pytest.approx(expected, rel=1e-6)]

    plain = train(tmp_path / "without", [], max_steps=8).model
    for (name, a), (_, b) in zip(model.state_dict().items(), plain.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("attached", [True, False])
def test_attach_binds_to_the_trainer_s_callback_handler(attached: bool, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``callback.attach(trainer)`` binds to the Trainer's public ``callback_handler``: with the call-stack fallback
    switched off, the measurements still reach a later callback's ``on_log``; unbound, they reach the log history
    only."""
    from capgeo_callbacks.integrations import hf_loggers

    monkeypatch.setattr(hf_loggers, "callback_handler", lambda callback: None)
    callback, recorder = CapgeoTrainerCallback(probe_rows(16), eval_steps=[0, 4], probes=False), LogRecorder()
    trainer = make_trainer(tmp_path, [recorder], max_steps=4)
    if attached:
        assert callback.attach(trainer) is trainer and callback.attach(trainer) is trainer  # added once
    else:
        trainer.add_callback(callback)
    trainer.train()
    handler = trainer.callback_handler.callbacks
    assert sum(one is callback for one in handler) == 1 and (handler[0] is callback) == attached
    assert [entry["step"] for entry in trainer.state.log_history if ACC_KEY in entry] == [0, 4]
    assert [step for step, logs in recorder.logs if ACC_KEY in logs] == ([0, 4] if attached else [])


@pytest.mark.slow
def test_resumed_run_rebuilds_its_series_from_the_log_history(tmp_path: Path) -> None:
    first = CapgeoTrainerCallback(probe_rows(), num_rows=64, points=9, overhead_budget="measure")
    train(tmp_path, [first], save_strategy="steps", save_steps=20)
    # the RNG state is transformers' own business, and 4.40 cannot load it back under torch >= 2.6 (torch.load's
    # weights_only default; 5.x can): without it, the run resumes all the same
    (tmp_path / "checkpoint-20" / "rng_state.pth").unlink()
    resumed = CapgeoTrainerCallback(probe_rows(), num_rows=64, points=9, overhead_budget="measure")
    train(tmp_path, [resumed], resume=str(tmp_path / "checkpoint-20"))
    assert resumed.steps == first.steps == [0, 1, 4, 10, 16, 22, 28, 34, 40]
    assert resumed.series["rankme/embed"][:5] == first.series["rankme/embed"][:5]  # restored, not re-measured
    # each measure's cadence goes on where it stopped: the probes at every 4th evaluation of the whole run
    assert [p[0] for p in resumed.series["probe_acc/embed"]] == [p[0] for p in first.series["probe_acc/embed"]] \
        == [0, 16, 40]


def test_alerts_are_raised_live_once_and_failures_are_skipped(monkeypatch, caplog) -> None:
    """A scripted measurement (collapse, recovery, accuracy crossing later) through the callback's own
    recording: the alert text is logged on the capgeo logger, on_alert called, the summary holds it."""
    rankme = [20, 30, 40, 30, 15, 8, 9, 14, 20, 26, 30, 32, 33, 33, 33, 33]
    acc = [0.0] * 11 + [0.6, 0.7, 0.8, 0.9, 0.95]
    calls = iter(range(100))

    def scripted(model, step):
        i = next(calls)
        if i == 3:
            raise RuntimeError("scripted failure")
        i -= i > 3
        return {"rankme/layers.0+final_norm": float(rankme[i])}, {"val/acc": acc[i], "val/logprob": -1.0}

    alerts: list = []
    callback = CapgeoTrainerCallback(probe_rows(8), settings=DetectionSettings(smoothing=1), on_alert=alerts.append,
                                     eval_steps=list(range(0, 170, 10)), overhead_budget=None)  # no training here
    monkeypatch.setattr(callback, "measure", scripted)
    model = torch.nn.Linear(2, 2)
    state = transformers.TrainerState()
    caplog.set_level(logging.WARNING, logger="capgeo")
    with pytest.warns(UserWarning, match="scripted failure"):
        for step in range(0, 170, 10):
            state.global_step = step
            callback.on_step_end(None, state, None, model=model)
    assert model.training  # the mode is restored
    # the failed measurement (step 30) is skipped: script entry i >= 3 lands at step 10 * (i + 1), so the trough
    # (entry 5) is at step 60, recovery is confirmed at entry 8 (step 90) and acquisition at entry 11 (step 120)
    assert [(a.kind, a.step, a.collapse_step) for a in alerts] == [("layer", 90, 60), ("run", 90, 60)]
    messages = [r.getMessage() for r in caplog.records if r.name == "capgeo"]
    assert sum("capgeo precursor alert at step 90" in m for m in messages) == 2
    summary = callback.build_summary(state)
    assert summary["verdict"] == "precursor" and summary["acquisition_step"] == 120
    assert [a["kind"] for a in summary["alerts"]] == ["layer", "run"]
    logs = state.log_history[-1]  # without a Trainer, the log history alone
    assert logs["rankme/layers.0+final_norm"] == 33.0 and logs[ACC_KEY] == 0.95 and logs["step"] == 160


def test_bad_arguments_name_the_valid_choices() -> None:
    rows = probe_rows(4)
    with pytest.raises(ValueError, match="valid: target, answer, first_answer"):
        CapgeoTrainerCallback(rows, selector="final")
    with pytest.raises(ValueError, match="valid: geometric, linear"):
        CapgeoTrainerCallback(rows, schedule="log")
    with pytest.raises(ValueError, match="needs probe_rows\\['answer_mask'\\]"):
        CapgeoTrainerCallback({"input_ids": rows["input_ids"]}, selector="first_answer")
    with pytest.raises(ValueError, match="must be a dict with 'input_ids'"):
        CapgeoTrainerCallback({"ids": rows["input_ids"]})
    with pytest.raises(ValueError, match="num_rows must be an integer >= 2"):
        CapgeoTrainerCallback(rows, num_rows=1)
    plain = CapgeoTrainerCallback({"input_ids": rows["input_ids"]})
    assert plain.selector == "last" and not plain.probes
    with pytest.raises(ValueError, match="matches none of embed, layers.0, layers.1\\+final_norm"):
        callback = CapgeoTrainerCallback(rows, layers="blocks.*")
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=8, n_head=2, vocab_size=50, n_positions=32))
        callback.on_train_begin(None, transformers.TrainerState(max_steps=10), None, model=model)


def test_transformers_is_imported_by_capgeo_callbacks_hf_only(monkeypatch) -> None:
    """No module of capgeo_callbacks but hf.py and hf_loggers.py (which hf.py imports once transformers is found)
    imports transformers at module level (offline analysis imports it inside the function that loads a revision),
    none imports tasks or models, and capgeo_callbacks.integrations.hf
    says what to install when transformers is missing."""
    package = Path(__file__).parents[2] / "capgeo_callbacks"
    for path in package.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            roots = {name.split(".")[0] for name in names}
            assert not roots & {"tasks", "models"}, path
            if path.name not in ("hf.py", "hf_loggers.py"):  # hf_loggers: imported by hf.py once it is there
                assert "transformers" not in roots, path
                assert "capgeo_callbacks.integrations.hf" not in names, path
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "capgeo_callbacks.integrations.hf")
    with pytest.raises(ImportError, match=r"pip install 'capgeo-callbacks\[hf\]'"):
        importlib.import_module("capgeo_callbacks.integrations.hf")
