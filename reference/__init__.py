"""The judged tasks: KernelBench problems plus the metadata judging needs. Knows nothing of sandboxes or HTTP.

Importing the package imports no torch: `TaskId`, `UnknownTask` and `task_id` name tasks without it (the CLI's
client commands and the settings' validation need no more), and the rest (`Task` and its parts, `all_tasks`,
`get_task`) imports `reference/task.py` and the task modules, with torch, on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reference.ids import TaskId

if TYPE_CHECKING:
    from reference.task import OFFICIAL, Shape, Task, Tolerance, Training

_FROM_TASK = ("OFFICIAL", "Shape", "Task", "Tolerance", "Training")
"""Names re-exported from reference/task.py, which imports torch: loaded when first asked for (PEP 562)."""


def __getattr__(name: str) -> Any:
    if name in _FROM_TASK:
        from reference import task

        return getattr(task, name)
    raise AttributeError(f"module 'reference' has no attribute {name!r}")


class UnknownTask(KeyError):
    """No task has this id; the message lists the valid ones."""

    def __str__(self) -> str:
        return str(self.args[0])


def task_id(value: str | TaskId) -> TaskId:
    """The TaskId this id names ("kl_div" or TaskId.KL_DIV), without importing the tasks; raises UnknownTask, a
    KeyError, listing the valid ids."""
    text = value.value if isinstance(value, TaskId) else str(value)
    try:
        return TaskId(text)
    except ValueError:
        raise UnknownTask(f"unknown task {text!r}; valid task ids: {', '.join(TaskId)}") from None


def all_tasks() -> list[Task]:
    """Every task, in TaskId order. Task modules are imported on first use (they read their problem files)."""
    from reference import cross_entropy, kl_div, training

    return [kl_div.TASK, cross_entropy.TASK, training.KL_DIV_TRAIN, training.CROSS_ENTROPY_TRAIN]


def get_task(value: str | TaskId) -> Task:
    """The task with this id ("kl_div" or TaskId.KL_DIV); raises UnknownTask, a KeyError, listing the valid ids."""
    wanted = task_id(value)
    return next(task for task in all_tasks() if task.id == wanted)


__all__ = ["OFFICIAL", "Shape", "Task", "TaskId", "Tolerance", "Training", "UnknownTask", "all_tasks", "get_task",
           "task_id"]
