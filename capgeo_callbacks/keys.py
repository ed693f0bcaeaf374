"""The names of the series capgeo records and reads, in one place.

A run's record holds the monitored accuracy as ``acc`` and every other series under the tag it was logged with:
the validation scalars a module logs (``val/...``), the training loss and learning rate, and one series per layer
under a measure's prefix (``rankme/<layer>``, ``ildr/<layer>``, ``probe_acc/<layer>``) or, for a measure of the whole
model, its own name (``commutator/defect``). Rules name what they read with these keys
(:class:`~capgeo_callbacks.rules.Needs`); :data:`HOW_TO_RECORD` says how a missing one is recorded. A rule's name is
recorded with each of its alerts and in the summary; a name since changed is read as the current one
(:func:`rule_name`), so older summaries, checkpoints and registrations read as they did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "ACC",
    "COMMUTATOR_DEFECT",
    "FORECAST",
    "HOW_TO_RECORD",
    "ILDR",
    "LOGPROB",
    "LR",
    "PROBABILITY",
    "PROBE_ACC",
    "RANKME",
    "RANKME_RECOVERY",
    "RENAMED_RULES",
    "TOKEN_ACC",
    "TRAIN_LOSS",
    "VAL_ACC",
    "VAL_LOSS",
    "RunKeys",
    "WEIGHT_NORM",
    "by_layer",
    "how_to_record",
    "key_words",
    "layer_names",
    "rule_name",
]

ACC = "acc"  # the monitored accuracy, whatever name it was logged under
VAL_ACC = "val/acc"  # exact match of the whole answer: the accuracy capgeo monitors by default
LOGPROB = "val/logprob"  # mean log-probability of the correct answer tokens
TOKEN_ACC = "val/token_acc"  # accuracy per answer token
VAL_LOSS = "val/loss"  # the validation loss (cross-entropy per target token: minus the log-prob where both are kept)
TRAIN_LOSS = "train/loss"  # mean training loss since the previous evaluation
LR = "lr"  # the first optimizer's learning rate
RANKME = "rankme/"  # RankMe of each watched layer: rankme/<layer>
ILDR = "ildr/"  # inter/intra-class distance ratio of each watched layer, on RankMe's rows: ildr/<layer>
PROBE_ACC = "probe_acc/"  # held-out linear probe accuracy of each watched layer: probe_acc/<layer>
WEIGHT_NORM = "weight_norm/"  # L2 norm of the parameters: weight_norm/global and weight_norm/<layer>
COMMUTATOR_DEFECT = "commutator/defect"  # the commutator defect of the loss on fixed pairs of training batches
FORECAST = "forecast/"  # each forecaster's predicted acquisition step: forecast/<rule>
PROBABILITY = "probability/"  # a forecaster's probability of acquisition within the budget: probability/<rule>
RANKME_RECOVERY = "rankme-recovery"  # the rule of a layer's RankMe collapse and recovery (rules.RankMeRecoveryRule)
RENAMED_RULES = {"study": RANKME_RECOVERY}  # a rule's former name -> its name now

HOW_TO_RECORD = {
    RANKME: "attach RankMeMonitor(layers=...) to the Trainer",
    ILDR: "attach RankMeMonitor(layers=...) to the Trainer, on validation batches that hold targets",
    PROBE_ACC: "attach LinearProbeMonitor(layers=...) to the Trainer",
    WEIGHT_NORM: "attach WeightNormMonitor() to the Trainer",
    COMMUTATOR_DEFECT: "attach CommutatorDefectMonitor() to the Trainer (with loss_fn=... unless the batches are "
                       "capgeo's dicts)",
    VAL_LOSS: "log it in validation_step, self.log('val/loss', loss), or name yours: "
              "PrecursorDetector(loss_monitor='...')",
    LOGPROB: "log the answer's mean log-prob as 'val/logprob', or name yours: PrecursorDetector(logprob_monitor='...')",
    TOKEN_ACC: "log the accuracy per answer token as 'val/token_acc', or name yours: "
               "PrecursorDetector(token_acc_monitor='...')",
    "chance": "pass the chance level in run_info={'chance': Chance(...).to_dict()}",
    "warmup_steps": "pass run_info={'warmup_steps': N}",
    "max_steps": "pass run_info={'max_steps': N}",
}

Value = TypeVar("Value")


def how_to_record(key: str) -> str:
    """How a missing series or run fact gets recorded, in words (the one-time message of a rule left out); for
    alternatives (``a|b``), how to record the first."""
    key = key.split("|")[0]
    if key in HOW_TO_RECORD:
        return HOW_TO_RECORD[key]
    if key.endswith("/*") and key[:-1] in HOW_TO_RECORD:
        return HOW_TO_RECORD[key[:-1]]
    if "/" in key:
        return f"log it at every evaluation, e.g. self.log({key!r}, value) in validation_step"
    return f"pass it in run_info={{{key!r}: ...}}"


def key_words(key: str) -> str:
    """A needed key in words: ``'val/logprob' or 'val/loss'`` for the alternatives ``val/logprob|val/loss``."""
    return " or ".join(repr(part) for part in key.split("|"))


def rule_name(name: str) -> str:
    """A rule's name now, from the name a summary, checkpoint or registration may have recorded before it changed
    (:data:`RENAMED_RULES`); any other name as it is."""
    return RENAMED_RULES.get(name, name)


def by_layer(series: Mapping[str, Value], prefix: str = RANKME) -> dict[str, Value]:
    """The series under ``prefix`` keyed by layer (the tag without the prefix), in the order given."""
    return {tag[len(prefix):]: value for tag, value in series.items() if tag.startswith(prefix)}


def layer_names(summary: Mapping[str, Any], prefix: str = RANKME) -> list[str]:
    """The watched layers of a summary in watch order (shallowest first: the detector's depth order): those its
    detection names, then any other with a series under ``prefix``."""
    names = list(summary.get("layers", {}) or {})
    names += [layer for layer in by_layer(summary.get("series", {}) or {}, prefix) if layer not in names]
    return names


@dataclass(frozen=True)
class RunKeys:
    """The names of what a run records, given once: the monitored accuracy's logged name (recorded as ``acc``), the
    user's names of the answer log-prob, the per-token accuracy and the validation loss (recorded as
    ``val/logprob``, ``val/token_acc`` and ``val/loss`` whatever they are called; None: not logged), and the RankMe
    series' tag prefix.

    Raises:
        ValueError: on a name that is not a non-empty string (or a prefix that does not end in ``/``).
    """

    monitor: str = VAL_ACC
    logprob_key: str | None = LOGPROB
    token_acc_key: str | None = TOKEN_ACC
    rankme_prefix: str = RANKME
    loss_key: str | None = VAL_LOSS

    def __post_init__(self) -> None:
        if not isinstance(self.monitor, str) or not self.monitor:
            raise ValueError(f"monitor must be a metric key (a non-empty string), got {self.monitor!r}")
        for name in ("logprob_key", "token_acc_key", "loss_key"):
            key = getattr(self, name)
            if key is not None and (not isinstance(key, str) or not key):
                raise ValueError(f"{name} must be a metric key or None, got {key!r}")
        prefix = self.rankme_prefix
        if not isinstance(prefix, str) or not prefix.endswith("/") or len(prefix) < 2:
            raise ValueError(f"rankme_prefix must be a tag prefix ending in '/', got {prefix!r}")

    @property
    def renamed(self) -> dict[str, str]:
        """The user's names of the quantities rules read -> the names rules and summaries know them by."""
        pairs = ((self.logprob_key, LOGPROB), (self.token_acc_key, TOKEN_ACC), (self.loss_key, VAL_LOSS))
        return {user: canonical for user, canonical in pairs if user and user != canonical}
