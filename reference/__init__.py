"""The judged tasks: KernelBench problems plus the metadata judging needs. Knows nothing of sandboxes or HTTP."""

from __future__ import annotations

from reference.task import OFFICIAL, Shape, Task, TaskId, Tolerance, Training


class UnknownTask(KeyError):
    """No task has this id; the message lists the valid ones."""

    def __str__(self) -> str:
        return str(self.args[0])


def all_tasks() -> list[Task]:
    """Every task, in TaskId order. Task modules are imported on first use (they read their problem files)."""
    from reference import cross_entropy, kl_div, training

    return [kl_div.TASK, cross_entropy.TASK, training.KL_DIV_TRAIN, training.CROSS_ENTROPY_TRAIN]


def get_task(task_id: str | TaskId) -> Task:
    """The task with this id ("kl_div" or TaskId.KL_DIV); raises UnknownTask, a KeyError, listing the valid ids."""
    value = task_id.value if isinstance(task_id, TaskId) else str(task_id)
    for task in all_tasks():
        if task.id.value == value:
            return task
    valid = ", ".join(t.id.value for t in all_tasks())
    raise UnknownTask(f"unknown task {value!r}; valid task ids: {valid}")


__all__ = ["OFFICIAL", "Shape", "Task", "TaskId", "Tolerance", "Training", "UnknownTask", "all_tasks", "get_task"]
