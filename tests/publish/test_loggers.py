"""What each Lightning logger receives from capgeo, read back by that logger's own reader.

A real Trainer runs a scripted measure (RankMe collapses and recovers before a scripted accuracy crosses the
threshold), so the PrecursorDetector raises one alert for the layer and one for the run, and at the end
publishes the verdict, the RankMe heatmap and hparams. Every logger must hold the alerts (text), the verdict
(text), the figure (an image) and the hparams. The side effects are capgeo_callbacks/loggers.py.
"""

from __future__ import annotations

import csv
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from matplotlib import image as mpimg
from torch.utils.data import DataLoader, TensorDataset

from capgeo_callbacks import DetectionSettings, PrecursorDetector
from capgeo_callbacks.publish.loggers import TEXT_FILENAME
from capgeo_callbacks.rules import RankMeRecoveryRule
from tests.callbacks.conftest import read_events
from tests.callbacks.scripted import INTERVAL, RANKME, ScriptedAccuracy, ScriptedMeasure

STEPS = INTERVAL * len(RANKME)
RUN_INFO = {"task": "scripted", "size": "xs", "seed": 3}
ALERT_START = "capgeo precursor alert at step 90"


pytestmark = pytest.mark.usefixtures("offline_loggers")


def run(logger: Logger, root: Path) -> PrecursorDetector:
    settings = DetectionSettings(smoothing=1)  # the study's rule alone: the scripted series are its story
    detector = PrecursorDetector(logprob_monitor=None, settings=settings, rules=[RankMeRecoveryRule(settings)],
                                 run_info=RUN_INFO, live_figures=False)
    trainer = Trainer(max_steps=STEPS, val_check_interval=INTERVAL, check_val_every_n_epoch=None, accelerator="cpu",
                      logger=logger, callbacks=[ScriptedMeasure(), detector], enable_progress_bar=False,
                      enable_model_summary=False, num_sanity_val_steps=0, enable_checkpointing=False,
                      default_root_dir=str(root))
    data = TensorDataset(torch.randn(8, 2))
    trainer.fit(ScriptedAccuracy(), DataLoader(data, batch_size=1), DataLoader(data, batch_size=8))
    assert [(a.kind, a.step) for a in detector.alerts] == [("layer", 90), ("run", 90)]
    assert detector.summary["verdict"] == "precursor"
    return detector


def check_text(alerts: list[str], verdicts: list[str]) -> None:
    assert len(alerts) == 2 and all(text.startswith(ALERT_START) for text in alerts)
    assert "RankMe of layer last" in alerts[0] and "RankMe of the run" in alerts[1]
    assert len(verdicts) == 1 and "verdict: precursor" in verdicts[0] and "| last |" in verdicts[0]


def check_image(image: np.ndarray) -> None:
    assert image.ndim == 3 and image.shape[2] in (3, 4) and min(image.shape[:2]) > 50
    assert np.ptp(image[..., :3]) > 0  # not a blank canvas


def test_tensorboard(tmp_path: Path) -> None:
    run(TensorBoardLogger(str(tmp_path), name="tb", default_hp_metric=False), tmp_path)
    events = read_events(tmp_path / "tb")
    tags = events.Tags()

    def texts(prefix: str) -> list[str]:
        return [event.tensor_proto.string_val[0].decode() for tag in tags["tensors"] if tag.startswith(prefix)
                for event in events.Tensors(tag)]

    check_text(texts("capgeo/alerts"), texts("capgeo/verdict"))
    (image,) = events.Images("capgeo/rankme_heatmap")
    check_image(mpimg.imread(__import__("io").BytesIO(image.encoded_image_string), format="png"))
    assert "rankme/last" in tags["scalars"] and "val/acc" in tags["scalars"]
    # hparams: one session with the run info, the verdict and the headline metrics, so the HPARAMS tab is filled
    from tensorboard.plugins.hparams import plugin_data_pb2

    content = events.PluginTagToContent("hparams")
    session = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = {key: value.string_value or value.number_value
               for key, value in session.session_start_info.hparams.items()}
    assert hparams["verdict"] == "precursor" and hparams["task"] == "scripted" and hparams["seed"] == 3
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert {m.name.tag for m in experiment.metric_infos} >= {"capgeo/acquisition_step", "capgeo/gap",
                                                             "capgeo/final_acc"}
    assert events.Scalars("capgeo/acquisition_step")[-1].value == 120
    assert events.Scalars("capgeo/gap")[-1].value == 60


def test_csv(tmp_path: Path) -> None:
    logger = CSVLogger(str(tmp_path), name="csv")
    run(logger, tmp_path)
    folder = Path(logger.log_dir)
    with (folder / TEXT_FILENAME).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    check_text([r["text"] for r in rows if r["tag"] == "capgeo/alerts"],
               [r["text"] for r in rows if r["tag"] == "capgeo/verdict"])
    assert [int(r["step"]) for r in rows if r["tag"] == "capgeo/alerts"] == [90, 90]
    check_image(mpimg.imread(folder / "capgeo" / "capgeo_rankme_heatmap.png"))
    hparams = yaml.safe_load((folder / "hparams.yaml").read_text())
    assert hparams["verdict"] == "precursor" and hparams["task"] == "scripted" and hparams["seed"] == 3
    with (folder / "metrics.csv").open(newline="") as handle:
        metrics = list(csv.DictReader(handle))
    assert [float(r["capgeo/acquisition_step"]) for r in metrics if r.get("capgeo/acquisition_step")] == [120.0]
    assert [float(r["capgeo/gap"]) for r in metrics if r.get("capgeo/gap")] == [60.0]


def wandb_records(run_dir: Path) -> list[Any]:
    """Every record of an offline run's ``.wandb`` file, parsed with wandb's own protobuf ``Record``.

    wandb 0.31 moved its record reader into the Go core, so the LevelDB-log framing it writes (a 7-byte file
    header ``:W&B``, then 32 KiB blocks of chunks with a 7-byte header: CRC, length, type full/first/middle/last)
    is unframed here.
    """
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, position, parts, records = 32768, 7, [], []
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is zero padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        chunk = data[position + 7:position + 7 + length]
        assert len(chunk) == length, f"a chunk cut short at offset {position} (the file is still being written)"
        position += 7 + length
        if kind == 0:
            break
        parts = [chunk] if kind in (1, 2) else [*parts, chunk]
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            records.append(record)
    return records


def items(entries: Any) -> dict[str, Any]:
    """A history row, summary or config update as a nested dict (``nested_key`` ``a/b``, ``path``)."""
    out: dict[str, Any] = {}
    for entry in entries:
        keys = [entry.key] if entry.key else list(entry.nested_key)
        target = out
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = json.loads(entry.value_json)
    return out


def test_wandb_offline(tmp_path: Path) -> None:
    wandb = pytest.importorskip("wandb")
    run(WandbLogger(project="capgeo-tests", save_dir=str(tmp_path), offline=True), tmp_path)
    # finish() returns once the core has taken the exit record, but the core keeps the .wandb file's last
    # 32 KiB block in memory and writes it when it closes the run's stream, after an inform_finish that finish()
    # only publishes (no reply): on a busy machine the file still held just its header here. teardown() waits
    # for the core process to exit, which it does only after closing that stream (the connection's requests are
    # handled in order), so the file is complete after it.
    wandb.finish()
    wandb.teardown()
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    records = wandb_records(run_dir)
    assert records and records[-1].WhichOneof("record_type") == "exit", "the .wandb file is not complete"
    of_type = lambda kind: [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]  # noqa: E731
    history = [items(row.item) for row in of_type("history")]

    # text: W&B tables, one per entry, each a file under files/media/table/ that its history row points at
    def texts(tag: str) -> list[str]:
        tables = [row[tag] for row in history if tag in row]
        assert all(table["_type"] == "table-file" for table in tables)
        return [data[-1] for table in tables for data in json.loads((run_dir / "files" / table["path"]).read_text())
                ["data"]]

    check_text(texts("capgeo/alerts"), texts("capgeo/verdict"))
    # the figure: an image file under files/media/images/
    (image,) = [row["capgeo/rankme_heatmap"] for row in history if "capgeo/rankme_heatmap" in row]
    assert image["_type"] == "images/separated" and image["count"] == 1
    (png,) = run_dir.glob("files/media/images/capgeo/rankme_heatmap_*.png")
    check_image(mpimg.imread(png))
    # a W&B alert for each alert raised
    alerts = of_type("alert")
    assert [a.title for a in alerts] == ["capgeo precursor alert"] * 2
    assert all(a.text.startswith(ALERT_START) for a in alerts)
    # hparams: the run config, and the headline metrics in the history
    config = {key: value for update in of_type("config") for key, value in items(update.update).items()}
    assert config["verdict"] == "precursor" and config["task"] == "scripted" and config["seed"] == 3
    logged = {key: value for row in history for key, value in row.items()}
    assert logged["capgeo/acquisition_step"] == 120 and logged["capgeo/gap"] == 60


@pytest.fixture(scope="module")
def mlflow_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str, Path]:
    """One run with an MLflow file store, read by the tests below: (client, run id, artifacts downloaded)."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("mlflow")
    uri = f"file:{root / 'mlruns'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store only on request
        logger = MLFlowLogger(experiment_name="capgeo-tests", tracking_uri=uri)
        run(logger, root)
        client = MlflowClient(tracking_uri=uri)
        local = Path(client.download_artifacts(logger.run_id, "capgeo", str(root / "download")))
    return client, logger.run_id, local


def mlflow_texts(local: Path, tag: str) -> list[str]:
    return [path.read_text() for path in sorted((local / tag).glob("*.md"))]


def test_mlflow_file_store(mlflow_run: tuple[Any, str, Path]) -> None:
    client, run_id, local = mlflow_run
    data = client.get_run(run_id).data
    assert data.params["verdict"] == "precursor" and data.params["task"] == "scripted" and data.params["seed"] == "3"
    assert data.metrics["capgeo/acquisition_step"] == 120 and data.metrics["capgeo/gap"] == 60
    assert [m.value for m in client.get_metric_history(run_id, "rankme/last")] == [float(r) for r in RANKME]
    listed = {info.path for info in client.list_artifacts(run_id, "capgeo")}
    assert listed >= {"capgeo/capgeo_alerts", "capgeo/capgeo_verdict", "capgeo/capgeo_rankme_heatmap.png"}
    verdicts = mlflow_texts(local, "capgeo_verdict")
    assert len(verdicts) == 1 and "verdict: precursor" in verdicts[0] and "| last |" in verdicts[0]
    alerts = mlflow_texts(local, "capgeo_alerts")
    assert alerts and all(text.startswith(ALERT_START) for text in alerts)
    check_image(mpimg.imread(local / "capgeo_rankme_heatmap.png"))


def test_mlflow_keeps_every_alert(mlflow_run: tuple[Any, str, Path]) -> None:
    _, _, local = mlflow_run
    # one artifact per entry (both alerts come at the same step; the file names do not keep their order)
    alerts = sorted(mlflow_texts(local, "capgeo_alerts"), key=lambda text: "RankMe of the run" in text)
    check_text(alerts, mlflow_texts(local, "capgeo_verdict"))
