"""The README's ``transformers.Trainer`` code, run as printed on a tiny Llama learning to reverse digits.

The python block is taken from README.md as it stands; the test gives it only the names it leaves to the user
(``model``, ``train``, ``probe_ids``, ``probe_labels``) and runs it in an empty folder: capgeo's RankMe reaches the
Trainer's own TensorBoard folder at every measured step, with the summary's values.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers.Trainer needs it
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from capgeo_callbacks.run.summary import read_summary  # noqa: E402
from tests.examples.helpers import ROOT  # noqa: E402
from tests.integrations.test_hf import DIGITS, Reversal, reversal  # noqa: E402

pytestmark = pytest.mark.slow


def readme_block() -> str:
    """The python block under "## With `transformers.Trainer`" in README.md."""
    section = (ROOT / "README.md").read_text().split("## With `transformers.Trainer`", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "README.md's 'With transformers.Trainer' has no python block"
    return found.group(1)


def test_the_block_is_six_lines_or_so_and_trains() -> None:
    code = readme_block()
    assert len([line for line in code.splitlines() if line.strip()]) <= 8 and ".train()" in code


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    ids = reversal(64, seed=123)
    labels = ids.clone()
    labels[:, : DIGITS + 1] = -100  # the answer only, unshifted as the model takes it
    namespace: dict[str, Any] = {"model": transformers.LlamaForCausalLM(config), "train": Reversal(512, seed=0),
                                 "probe_ids": ids, "probe_labels": labels}
    here = tmp_path_factory.mktemp("readme-hf")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(here)
        exec(readme_block(), namespace)  # noqa: S102 - the README's code
    return here


def test_the_summary_has_rankme_per_layer_and_the_tensorboard_folder_every_measured_step(folder: Path) -> None:
    summary = read_summary(folder / "out" / "capgeo_summary.json")
    rankme = {tag: points for tag, points in summary["series"].items() if tag.startswith("rankme/")}
    assert len(rankme) >= 3  # the embeddings and each of the 2 blocks at least
    events = sorted((folder / "out").rglob("events.out.tfevents.*"))
    assert events, "no TensorBoard folder under out/"
    logged: dict[str, dict[int, float]] = {}
    for path in events:
        accumulator = EventAccumulator(str(path))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            logged.setdefault(tag, {}).update({event.step: event.value for event in accumulator.Scalars(tag)})
    for tag, points in rankme.items():
        found = next((values for name, values in logged.items() if name.endswith(tag)), None)
        assert found is not None, f"{tag} not in TensorBoard: {sorted(logged)[:20]}"
        assert sorted(found) == [step for step, _ in points]  # every measured step, at its own step
        assert [found[step] for step, _ in points] == pytest.approx([value for _, value in points], rel=1e-5)
