"""The columns of runs.parquet (`results/<sweep>/runs.parquet`, one row per finished trial), named once: their
order, the two dataset identifiers (`dataset_id`, `data_fingerprint`) and the rule that a column is never
renamed (committed references must still read): docs/contracts.md ("runs.parquet").
"""
from __future__ import annotations

from protocols import parameter_names

TRIAL_ID = "trial_id"
RUN_DIR = "run_dir"
STAGE = "stage"
ARCH = "arch"
SEED = "seed"
PROTOCOL = "protocol"
DELAY_S = "delay_s"
HISTORY_LEN = "history_len"
TASK = "task"
#: A multi-task run's columns of task t > 0: the one-task column, this separator, the task's name
#: (`test_auc@long_view`); its `train.tasks` column lists the names, its `task` is task 0's (docs/tasks.md).
TASK_SEPARATOR = "@"
TASKS = "train.tasks"
DATASET_ID = "dataset_id"
#: Node that ran the trial (a cluster's nodes must share the driver's software; harness.sweep.trainable).
RAY_NODE = "ray_node"
#: The key a tuning stage chose per setting, e.g. `train.lr` (its value is in that column); sweeps with a
#: `tuning:` section only (harness.sweep.tuning).
TUNED = "tuned"
#: The round of seeds a trial ran in (1, 2, ...; sweeps with `rounds:` only: harness/sweep/launcher.py).
ROUND = "round"

#: The retrains of a trial under a sweep's `retry:` (harness/sweep/trainable.py): what each column holds and why
#: `train.lr` keeps the planned rate: docs/sweeps.md ("Retry").
RETRY_ATTEMPTS = "retry_attempts"
RETRY_LR_INITIAL = "retry_lr_initial"
RETRY_LR_USED = "retry_lr_used"
RETRY_HISTORY = "retry_history"

#: Metrics columns the analysis reads by name.
DATA_FINGERPRINT = "data_fingerprint"
FLOPS_PER_TARGET = "flops_per_target"
PARAMS_NON_EMBEDDING = "params_non_embedding"
TRAIN_TARGETS = "train_targets"  # training targets seen
WALL_S = "wall_s"  # the run's wall seconds (harness/train.py)
#: sha256 (16 hex) of the row's every other column, timings included (nothing in a written row legitimately
#: changes): written by harness.sweep.collect, checked by `analyze` and `reference check` (docs/sweeps.md).
ROW_DIGEST = "row_digest"


def protocol_parameter_columns() -> tuple[str, ...]:
    """The parameters of every registered protocol, sorted (`delay_s`, `history_len`, ...), one column each.
    From the protocol registry, so a protocol added from RECSCALE_PROTOCOL_PATH brings its columns along."""
    return tuple(parameter_names())


def data_setting_columns() -> tuple[str, ...]:
    """Settings that change the prepared dataset and have a plain column in every runs.parquet."""
    return (PROTOCOL, *protocol_parameter_columns(), TASK)


def leading_columns() -> tuple[str, ...]:
    """The first columns, in this order (those present)."""
    return (TRIAL_ID, RUN_DIR, STAGE, ARCH, SEED, *data_setting_columns(), DATASET_ID)


DATA_PREFIX, MODEL_PREFIX, TRAIN_PREFIX = "data.", "model.", "train."
#: Prefixes of the setting columns beyond the plain ones.
CONFIG_PREFIXES: tuple[str, ...] = (DATA_PREFIX, MODEL_PREFIX, TRAIN_PREFIX)
#: The name of the data bundle a trial used (a sweep whose `data` axis names its values).
DATA_NAME = f"{DATA_PREFIX}name"
#: The training-set size a sweep varies for the data-scaling fit (analysis/fits/data_scaling.py).
N_TRAIN = f"{DATA_PREFIX}n_train"
#: A named model size (`model.size: s`), a size column although not numeric (analysis/columns.py).
MODEL_SIZE = f"{MODEL_PREFIX}size"
#: Prefix of the machine facts a run records (harness.fingerprint.machine_fingerprint), one column each.
ENV_PREFIX = "env_"


def metric_column(split: str, metric: str) -> str:
    """`<split>_<metric>`: a registered metric (harness.metric_registry) of one split, e.g. `test_auc`."""
    return f"{split}_{metric}"


def oracle_auc_column(split: str) -> str:
    """`oracle_<split>_auc`: the AUC of the true probabilities on one split (synthetic logs only)."""
    return f"oracle_{split}_auc"
