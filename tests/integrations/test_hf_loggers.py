"""What the ``report_to`` integrations of a real ``transformers.Trainer`` receive from CapgeoTrainerCallback, each
read back by its own reader: TensorBoard (tensorboard's EventAccumulator) and MLflow (its client, over a file
store). Every measured step is there, at its step, with the summary's values; so are the alerts, the verdict, the
figures, the hparams and the dashboard's layout; the Trainer's bar shows the run's figures."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers.Trainer needs it
mlflow = pytest.importorskip("mlflow")

from matplotlib import image as mpimg  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from tensorboard.plugins.custom_scalar import layout_pb2  # noqa: E402
from tensorboard.plugins.hparams import plugin_data_pb2  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

from capgeo_callbacks.detection import DetectionSettings  # noqa: E402
from capgeo_callbacks.integrations.hf import CapgeoTrainerCallback  # noqa: E402
from capgeo_callbacks.integrations.hf_loggers import PREFIX  # noqa: E402
from tests.callbacks.conftest import read_events  # noqa: E402
from tests.integrations.test_hf import LogRecorder, Reversal, probe_rows  # noqa: E402

pytestmark = pytest.mark.usefixtures("offline_loggers")


def mlflow_key(tag: str) -> str:
    """A key as transformers' MLflowCallback logs it: the characters MLflow refuses replaced by ``_``."""
    return re.sub(r"[^0-9A-Za-z_\-\.\ :/]", "_", tag)


@pytest.fixture
def mlflow_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    """An MLflow file store for the Trainer's MLflowCallback (it reads the environment); mlflow's global tracking
    URI, which the callback sets, is restored after the test."""
    from mlflow.tracking._tracking_service import utils

    uri = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setattr(utils, "_tracking_uri", None)
    return MlflowClient(tracking_uri=uri)


def train(tmp_path: Path, callbacks: list, max_steps: int, report_to: tuple[str, ...] = ("tensorboard", "mlflow"),
          **model: int) -> Trainer:
    torch.manual_seed(0)
    config = GPT2Config(**{"n_layer": 2, "n_embd": 32, "n_head": 2, **model}, vocab_size=50, n_positions=32)
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=list(report_to),
                             max_steps=max_steps, per_device_train_batch_size=16, learning_rate=3e-3,
                             logging_steps=10, seed=0, save_strategy="no", dataloader_num_workers=0)
    trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Reversal(512, seed=0),
                      callbacks=callbacks)
    trainer.train()
    return trainer


def texts(events: Any, tag: str) -> list[tuple[int, str]]:
    return [(event.step, event.tensor_proto.string_val[0].decode()) for event in events.Tensors(f"{tag}/text_summary")]


@pytest.mark.slow
def test_every_measurement_reaches_every_logger_at_its_step(tmp_path: Path, mlflow_store: MlflowClient,
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    callback = CapgeoTrainerCallback(probe_rows(), num_rows=256, points=9, run_info={"task": "reverse"},
                                     overhead_budget="measure")  # every point kept
    recorder = LogRecorder()
    trainer = train(tmp_path, [callback, recorder], max_steps=40)
    summary = json.loads((tmp_path / "capgeo_summary.json").read_text())
    steps = [0, 1, 4, 10, 16, 22, 28, 34, 40]
    series = {callback.session.monitor if tag == "acc" else tag: points for tag, points in summary["series"].items()}
    assert {"val/acc", "rankme/embed", "rankme/layers.1+final_norm", "probe_acc/layers.0", "val/loss"} <= set(series)

    (folder,) = (tmp_path / "runs").iterdir()  # the Trainer's TensorBoard folder
    events = read_events(folder)
    (run,) = mlflow_store.search_runs(["0"])
    for tag, points in series.items():  # the probes at their registered cadence, every 4th evaluation
        assert [step for step, _ in points] == (steps[::4] if tag.startswith("probe_acc/") else steps), tag
        board = events.Scalars(PREFIX + tag)
        assert [(e.step, e.value) for e in board] == [(s, pytest.approx(v, rel=1e-6)) for s, v in points], tag
        history = mlflow_store.get_metric_history(run.info.run_id, mlflow_key(tag))
        assert sorted((m.step, m.value) for m in history) == [(s, pytest.approx(v)) for s, v in points], tag
    # a user's callback gets each measurement as a log event at its step, as the Trainer's log history keeps it
    measured = [(step, logs) for step, logs in recorder.logs if "rankme/embed" in logs]
    assert [(step, logs["rankme/embed"]) for step, logs in measured] == [tuple(p) for p in series["rankme/embed"]]
    assert [entry["step"] for entry in trainer.state.log_history if "rankme/embed" in entry] == steps

    # the dashboard: the layout's patterns name the Trainer's tags (each chart of RankMe finds its series)
    (config,) = events.Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout.FromString(config.tensor_proto.string_val[0])
    scalars = events.Tags()["scalars"]
    charts = {chart.title: list(chart.multiline.tag) for category in layout.category for chart in category.chart}
    for title, patterns in charts.items():
        if title.startswith(("RankMe", "accuracy")):
            assert all(any(re.match(p, tag) for tag in scalars) for p in patterns), title
    # the verdict, the story card and the heatmap, hparams
    [(step, verdict)] = texts(events, "capgeo/verdict")
    assert step == 40 and f"verdict: {summary['verdict']}" in verdict
    for tag in ("capgeo/story", "capgeo/rankme_heatmap"):
        image = events.Images(tag)[-1]
        assert mpimg.imread(io.BytesIO(image.encoded_image_string), format="png").shape[0] > 50
    session = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]).session_start_info
    assert session.hparams["capgeo/task"].string_value == "reverse"
    assert session.hparams["capgeo/verdict"].string_value == summary["verdict"]
    data = mlflow_store.get_run(run.info.run_id).data
    assert data.params["capgeo/verdict"] == summary["verdict"] and data.params["capgeo/task"] == "reverse"
    listed = {info.path for info in mlflow_store.list_artifacts(run.info.run_id, "capgeo")}
    assert {"capgeo/capgeo_verdict", "capgeo/capgeo_story.png", "capgeo/capgeo_rankme_heatmap.png"} <= listed

    # the Trainer's bar shows the run's figures; its printer is not sent capgeo's values
    err = capfd.readouterr().err
    assert "val/acc=" in err and "rankme layers.1+final_norm=" in err
    assert "rankme/embed" not in err


RANKME = [20, 30, 40, 30, 15, 8, 9, 14, 20, 26, 30, 32, 33]
ACC = [0.0] * 10 + [0.6, 0.7, 0.8]
TAG = "rankme/layers.0+final_norm"


def scripted_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, report_to: tuple[str, ...] = ("tensorboard",
                 "mlflow")) -> CapgeoTrainerCallback:
    """A scripted measurement (collapse, recovery, accuracy crossing later) every 10 steps of a real Trainer: the
    layer's and the run's alerts at step 80, acquisition at step 100, confirmed at 120."""
    calls = iter(range(len(ACC)))

    def scripted(model: torch.nn.Module, step: int) -> tuple[dict[str, float], dict[str, float]]:
        i = next(calls)
        return {TAG: float(RANKME[i])}, {"val/acc": ACC[i], "val/logprob": -1.0}

    callback = CapgeoTrainerCallback(probe_rows(8), settings=DetectionSettings(smoothing=1),
                                     eval_steps=list(range(0, 130, 10)), overhead_budget="measure")  # every card
    monkeypatch.setattr(callback, "measure", scripted)
    train(tmp_path, [callback], max_steps=120, report_to=report_to, n_layer=1, n_embd=8)
    assert [(a.kind, a.step) for a in callback.alerts] == [("layer", 80), ("run", 80)]
    return callback


@pytest.mark.slow
def test_alerts_reach_the_loggers_when_raised(tmp_path: Path, mlflow_store: MlflowClient,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The alerts are text entries at the step they were raised, and the story card is published there."""
    scripted_run(tmp_path, monkeypatch)

    (folder,) = (tmp_path / "runs").iterdir()
    events = read_events(folder)
    alerts = texts(events, "capgeo/alerts")
    assert [step for step, _ in alerts] == [80, 80]
    assert all(text.startswith("capgeo precursor alert at step 80") for _, text in alerts)
    # the first alert, acquisition confirmed (at 100, held to 120), the end
    assert [image.step for image in events.Images("capgeo/story")] == [80, 120, 120]
    assert [e.step for e in events.Scalars(PREFIX + "capgeo/alerts_raised")] == list(range(0, 130, 10))
    (run,) = mlflow_store.search_runs(["0"])
    listed = {info.path for info in mlflow_store.list_artifacts(run.info.run_id, "capgeo/capgeo_alerts")}
    assert len(listed) == 2


@pytest.mark.slow
def test_wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B, read from its offline run file: every measurement in the history at its step (HF's
    ``train/global_step``), the alerts as W&B alerts and text tables, the story card, capgeo's hparams."""
    wandb = pytest.importorskip("wandb")
    from tests.publish.test_loggers import items, wandb_records

    monkeypatch.setenv("WANDB_PROJECT", "capgeo-tests")
    wandb.teardown()  # a W&B set up by an earlier test keeps its settings (its folder): set up afresh in this one's
    callback = scripted_run(tmp_path, monkeypatch, report_to=("wandb",))
    wandb.finish()
    wandb.teardown()  # the .wandb file is complete once the core process has exited (tests/publish/test_loggers.py)
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    records = wandb_records(run_dir)
    of_type = lambda kind: [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]  # noqa: E731
    history = [items(row.item) for row in of_type("history")]
    measured = [(row["train/global_step"], row[PREFIX + TAG]) for row in history if PREFIX + TAG in row]
    script = list(zip(range(0, 130, 10), RANKME, strict=True))
    assert measured == [tuple(point) for point in callback.series[TAG]] == script
    alerts = of_type("alert")
    assert [a.title for a in alerts] == ["capgeo precursor alert"] * 2
    assert all(a.text.startswith("capgeo precursor alert at step 80") for a in alerts)
    assert sum("capgeo/alerts" in row for row in history) == 2 and any("capgeo/story" in row for row in history)
    config = {key: value for update in of_type("config") for key, value in items(update.update).items()}
    assert config["capgeo/verdict"] == "precursor"
