"""Naming a task needs no torch: `reference.TaskId`, `task_id` and `UnknownTask` come from reference/ids.py and the
package's own module; `Task` and the task modules load on first use (reference/__init__.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import reference
from reference import TaskId, UnknownTask, task_id


def test_task_id_names_every_task_and_refuses_others_listing_them() -> None:
    assert [task_id(t.id.value) for t in reference.all_tasks()] == list(TaskId)
    assert task_id(TaskId.KL_DIV) is TaskId.KL_DIV
    with pytest.raises(UnknownTask, match="unknown task 'softmax'; valid task ids: kl_div, cross_entropy, kl_div_tr"):
        task_id("softmax")
    with pytest.raises(UnknownTask, match="valid task ids"):
        reference.get_task("softmax")


def test_the_package_imports_no_torch_until_a_task_is_asked_for() -> None:
    probe = ("import sys, reference\nreference.task_id('kl_div')\nassert 'torch' not in sys.modules\n"
             "assert reference.get_task('kl_div').id is reference.TaskId.KL_DIV and reference.OFFICIAL == 'official'\n"
             "assert 'torch' in sys.modules\nprint('ok')")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
