"""The tasks' ids, torch-free: what a command line, a setting or a stored row names a task by.

Kept out of `reference/task.py`, which imports torch (a task's reference is a torch module), so that a program that
only names tasks (the CLI's client commands, the settings' validation) does not pay torch's import: 3 s on an idle
2-core box, 7-9 s beside a header build.
"""

from __future__ import annotations

import enum


class TaskId(enum.StrEnum):
    """Every task the judge knows, defined once.

    A `StrEnum`: `str()`, f-strings and `%s` give the id itself ("kl_div"), so a TaskId can go wherever the id's text
    goes (cache keys, command lines, log lines, stored rows) and writes what the plain string wrote."""

    KL_DIV = "kl_div"
    CROSS_ENTROPY = "cross_entropy"
    KL_DIV_TRAIN = "kl_div_train"
    CROSS_ENTROPY_TRAIN = "cross_entropy_train"
