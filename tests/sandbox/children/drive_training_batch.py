"""Run in its own process by tests/sandbox/test_training_batches.py: a real TrainingChild, driven in-process
(its tripwires patch aten kernels process-wide, which the test runner must not get), through one timed batch.

argv: candidate source path, number of steps. Prints one JSON object: what each command answered, or the
rejection the batch ended with.
"""

import json
import sys

import torch

from reference import get_task
from reference.training import full_gradient, grad_output_scale
from sandbox import protocol as msg
from sandbox.shared.compare import fingerprint
from sandbox.child.harness import OutputRejected
from sandbox.child.training import TrainingChild
from sandbox.shared.projection import project_rows, projection_weights

source, steps = sys.argv[1], int(sys.argv[2])
task = get_task("kl_div_train")
shape = list(task.cpu_shape)
child = TrainingChild("kl_div_train", "cpu", source, res_fd=-1)
child.load(msg.Load())
seeds = [11 + i for i in range(steps)]
child.arm(msg.Arm(calls=steps, shape=shape))
calls = [msg.ArmedCall(distribution="official", seed=s) for s in seeds]
try:
    went, payloads = child.go(msg.Go(shape=shape, calls=calls))
except OutputRejected as exc:
    print(json.dumps({"rejected": str(exc)}))
    sys.exit(0)
checks = []
for call, seed in enumerate(seeds):
    meta, (projections, _rows) = child.grad_check(msg.GradCheck(rows=[0], weight_seed=99, call=call))
    inputs = task.make_inputs(tuple(shape), "official", seed, torch.device("cpu"))
    truth = full_gradient(task, inputs) * grad_output_scale(seed)
    got = torch.frombuffer(bytearray(projections), dtype=torch.float64)
    want = project_rows(truth.float(), projection_weights(shape[1], 99, torch.device("cpu")))
    checks.append(float((got - want).abs().max() / want.abs().max()))
try:
    child.grad_check(msg.GradCheck(rows=[0], weight_seed=99, call=steps))
    beyond = None
except RuntimeError as exc:
    beyond = str(exc)
inspected = child.inspect(msg.Inspect())
made = [fingerprint(task.make_inputs(tuple(shape), "official", s, torch.device("cpu"))) for s in seeds]
print(json.dumps({"made": len(inspected.after_all), "outputs": len(payloads), "times": len(went.times_ms),
                  "relative_errors": checks, "after_all": len(inspected.after_all),
                  "unchanged": inspected.after_all == made, "beyond": beyond}))
