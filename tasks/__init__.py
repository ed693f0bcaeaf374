"""capgeo's algorithmic tasks as LightningDataModules.

Nine tasks (``copy``, ``reverse``, ``compare``, ``parity``, ``add``, ``mod``, ``sort``, ``mul``,
``deduce``) at three difficulties, generated on the fly from a seed over one shared vocabulary, with
train / validation / test splits made disjoint by hashing each question.

Example::

    from tasks import make_datamodule, decode
    dm = make_datamodule("add", "easy", seed=0)
    batch = dm.train_batch(0)
    print(decode(batch["input_ids"][0]))  # e.g. "3 7 + 4 5 = 0 8"
"""

from tasks.datamodule import TaskDataModule, make_datamodule
from tasks.params import DIFFICULTIES, TASK_PARAMS, TASKS
from tasks.table import params_table
from tasks.vocab import PAD_ID, VOCAB, VOCAB_SIZE, decode, encode

__all__ = [
    "DIFFICULTIES",
    "PAD_ID",
    "TASKS",
    "TASK_PARAMS",
    "VOCAB",
    "VOCAB_SIZE",
    "TaskDataModule",
    "decode",
    "encode",
    "make_datamodule",
    "params_table",
]
