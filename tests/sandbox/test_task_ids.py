"""Task ids as `TaskId` (a StrEnum) through the sandbox write exactly the text the plain ids wrote: cache keys, stored
verdicts, a child's command line."""

from __future__ import annotations

import json
import os

import torch

from reference import TaskId
from sandbox import prepare
from sandbox.environment import device_name
from sandbox.shared import timing
from sandbox.execution.baseline import cache_key
from sandbox.verdict import Verdict


def test_a_task_id_formats_as_the_id_itself() -> None:
    assert f"{TaskId.KL_DIV}" == str(TaskId.KL_DIV) == "%s" % TaskId.KL_DIV == "{}".format(TaskId.KL_DIV) == "kl_div"
    assert os.fsencode(TaskId.CROSS_ENTROPY_TRAIN) == b"cross_entropy_train"  # a child's `--task` argument
    assert json.dumps({"task": TaskId.KL_DIV}) == '{"task": "kl_div"}'


def test_the_baseline_cache_key_is_the_one_the_plain_id_made() -> None:
    key = cache_key(TaskId.KL_DIV, "cpu", (2, 3), 1)
    assert key == cache_key("kl_div", "cpu", (2, 3), 1)
    assert key == (f"{device_name('cpu')}|torch {torch.__version__}|kl_div|2x3|threads 1"
                   f"|timing v{timing.METHOD_VERSION}")


def test_a_stored_verdict_holds_the_plain_id() -> None:
    """A verdict made from a TaskId (here: no code in the text, so no build) is stored with the id's text."""
    verdict = prepare(TaskId.CROSS_ENTROPY, "no code block here")
    assert isinstance(verdict, Verdict) and verdict.status == "compile_error"
    assert type(verdict.task) is str and verdict.task == "cross_entropy"
    assert verdict.model_dump(mode="json")["task"] == "cross_entropy"
    assert '"task":"cross_entropy"' in verdict.model_dump_json()
