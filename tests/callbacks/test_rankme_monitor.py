from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.loggers import TensorBoardLogger

from capgeo_callbacks import PrecursorDetector, RankMeMonitor
from tests.callbacks.conftest import ForeignEncoder, loaders, read_events, reference_rankme
from tests.measures.test_ildr import reference_ildr


def fit(tmp_path, callbacks, steps: int = 24, seed: int = 0) -> tuple[ForeignEncoder, Trainer]:
    seed_everything(seed, verbose=False)
    model = ForeignEncoder()
    train, val = loaders()
    trainer = Trainer(
        max_steps=steps, val_check_interval=8, logger=TensorBoardLogger(str(tmp_path), name="", version=""),
        callbacks=callbacks, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        num_sanity_val_steps=2, accelerator="cpu", deterministic=True,
    )
    trainer.fit(model, train, val)
    return model, trainer


def test_foreign_model_watched_by_glob_matches_independent_rankme(tmp_path) -> None:
    monitor = RankMeMonitor(layers="encoder.layers.*", selector="mean", num_rows=200)
    model, trainer = fit(tmp_path, [monitor])
    assert monitor.layer_names == ["encoder.layers.0", "encoder.layers.1"]
    # "encoder." dropped; numbers keep "layers."; ILDR of the same rows beside RankMe
    assert monitor.tags == ["rankme/layers.0", "rankme/layers.1", "ildr/layers.0", "ildr/layers.1"]
    # hooks are removed after measuring
    for name in monitor.layer_names:
        assert not dict(model.named_modules())[name]._forward_hooks

    # the last logged value equals an independent RankMe of the same rows (first 200 of the val set)
    _, val = loaders()
    captured: list[torch.Tensor] = []
    handle = model.encoder.layers[1].register_forward_hook(lambda m, a, out: captured.append(out.mean(dim=1)))
    model.eval()
    with torch.no_grad():
        for x, _ in val:
            model(x)
    handle.remove()
    rows = torch.cat(captured)[:200].numpy()
    expected = reference_rankme(rows)
    events = read_events(tmp_path)
    logged = [e.value for e in events.Scalars("rankme/layers.1")]
    assert len(logged) == 3  # steps 8, 16, 24; the sanity check is not measured
    assert logged[-1] == pytest.approx(expected, rel=1e-5)
    assert [s for s, _ in monitor.series["rankme/layers.1"]] == [8, 16, 24]
    assert monitor.rows == {f"{prefix}/layers.{i}": 200 for prefix in ("rankme", "ildr") for i in range(2)}
    # ILDR of those rows by the batches' labels (the sum mod 4), in the logger too
    labels = torch.cat([y for _, y in val])[:200]
    assert [e.value for e in events.Scalars("ildr/layers.1")][-1] == pytest.approx(
        reference_ildr(torch.from_numpy(rows), labels), rel=1e-5)


def test_every_n_evals(tmp_path) -> None:
    monitor = RankMeMonitor(layers="encoder.layers.1", selector="mean", num_rows=64, every_n_evals=2)
    fit(tmp_path, [monitor], steps=32)
    assert [s for s, _ in monitor.series["rankme/encoder.layers.1"]] == [8, 24]


def test_observing_does_not_change_training(tmp_path) -> None:
    plain, _ = fit(tmp_path / "plain", [])
    watched, _ = fit(tmp_path / "watched", [RankMeMonitor(layers="encoder.layers.*", selector="all"),
                                            PrecursorDetector(monitor="val_acc", logprob_monitor=None)])
    for (name, a), (_, b) in zip(plain.state_dict().items(), watched.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_unmatched_layer_lists_close_names(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"'encoder\.layer\.\*' matches no module; closest: .*encoder\.layers"):
        fit(tmp_path, [RankMeMonitor(layers="encoder.layer.*", selector="mean")])


def test_answer_selector_without_mask_warns_and_skips(tmp_path) -> None:
    monitor = RankMeMonitor(layers="encoder.layers.0", selector="first_answer")  # needs batch["answer_mask"]
    with pytest.warns(UserWarning, match=r"selector 'first_answer' needs batch\['answer_mask'\]") as caught:
        fit(tmp_path, [monitor], steps=8)
    assert monitor.series == {}
    # shown at the user's line that led to it (fit()'s trainer.fit; inside a forward hook, the model's own forward
    # that called the layer), never at capgeo's own code
    ours = [(Path(w.filename), w.lineno) for w in caught if str(w.message).startswith("RankMeMonitor:")]
    assert ours and all(path.parent == Path(__file__).parent for path, _ in ours), ours
    assert any(path == Path(__file__) for path, _ in ours)  # the usable-rows word, at fit()'s trainer.fit


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="valid: target, answer, first_answer, question_mean, last, mean, all"):
        RankMeMonitor(selector="first")
    with pytest.raises(ValueError, match="num_rows"):
        RankMeMonitor(num_rows=1)
    with pytest.raises(ValueError, match="every_n_evals"):
        RankMeMonitor(every_n_evals=0)


def test_nan_hidden_states_are_skipped_and_training_continues(tmp_path) -> None:
    def nan_rows(hidden: torch.Tensor, batch: object) -> torch.Tensor:
        rows = hidden.mean(dim=1).clone()
        rows[0, 0] = float("nan")
        return rows

    monitor = RankMeMonitor(layers="encoder.layers.0", selector=nan_rows, num_rows=64)
    with pytest.warns(UserWarning, match="NaN"):
        _, trainer = fit(tmp_path, [monitor], steps=16)
    assert trainer.global_step == 16
    assert monitor.series == {}


def test_state_dict_round_trip() -> None:
    monitor = RankMeMonitor(layers="a.*")
    monitor.series = {"rankme/x": [[8, 3.0], [16, 2.5]]}
    monitor.evaluations = 2
    monitor.rows = {"rankme/x": 100}
    restored = RankMeMonitor(layers="a.*")
    restored.load_state_dict(monitor.state_dict())
    assert restored.series == monitor.series and restored.evaluations == 2 and restored.rows == {"rankme/x": 100}
    restored.load_state_dict({})  # tolerates missing keys
    assert restored.series == {}
