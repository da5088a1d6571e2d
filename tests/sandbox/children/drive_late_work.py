"""Run in its own process by tests/sandbox/test_harness_reach.py: a real child (its tripwires and audit hook are
process-wide) through one timed batch, after which this script changes what the batch produced, in place, as work
a candidate deferred past the batch's last event would, before the harness reads it again.

argv: "forward" (a `Child` of kl_div: the first call's output is changed before `inspect`) or "step" (a
`TrainingChild` of kl_div_train: the first step's gradient is changed before its `grad_check`), the candidate's
source path, and "late" or "untouched". Prints one JSON object: the child's own findings afterwards.
"""

import json
import sys

from reference import get_task
from sandbox import protocol as msg
from sandbox.child.harness import Child
from sandbox.child.training import TrainingChild

mode, source, late = sys.argv[1], sys.argv[2], sys.argv[3] == "late"
task_id = "kl_div" if mode == "forward" else "kl_div_train"
child = (Child if mode == "forward" else TrainingChild)(task_id, "cpu", source, res_fd=-1)
child.load(msg.Load())
shape = list(get_task(task_id).cpu_shape)
child.arm(msg.Arm(calls=2, shape=shape))
child.go(msg.Go(shape=shape, calls=[msg.ArmedCall(distribution="official", seed=s) for s in (11, 12)]))
if mode == "forward":
    if late:
        child.window_outputs[0][0].add_(1.0)
    child.inspect(msg.Inspect())
else:
    if late:
        child.grads[0].mul_(2.0)
    for call in range(2):
        child.grad_check(msg.GradCheck(rows=[0], weight_seed=99, call=call))
    child.inspect(msg.Inspect())
print(json.dumps({"findings": child.findings}))
