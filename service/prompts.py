"""A KernelBench-style generation prompt for a task: the instruction, one worked example, the problem.

It follows KernelBench's one-shot prompt (an elementwise-add `Model` and its `load_inline` `ModelNew`),
and adds what this judge checks so a model is not surprised by its verdict.
"""

from __future__ import annotations

from reference import Task

EXAMPLE_MODEL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    a = torch.randn(1, 128).cuda()
    b = torch.randn(1, 128).cuda()
    return [a, b]


def get_init_inputs():
    return []
'''

EXAMPLE_MODEL_NEW = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

elementwise_add_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    elementwise_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
"""

elementwise_add_cpp_source = "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"

elementwise_add = load_inline(
    name="elementwise_add",
    cpp_sources=elementwise_add_cpp_source,
    cuda_sources=elementwise_add_source,
    functions=["elementwise_add_cuda"],
    verbose=True,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cuda(a, b)
'''


def generation_prompt(task: Task) -> str:
    forbidden = ", ".join(sorted(task.forbidden_aten_ops)) or "none"
    training = f"\n{task.training.statement}\n" if task.training else ""
    return f"""You write custom CUDA kernels to replace the pytorch operators in the given architecture to get speedups.

You have complete freedom to choose the set of operators you want to replace. You may make the decision to replace some operators with custom CUDA kernels and leave others unchanged. You may replace multiple operators with custom implementations, consider operator fusion opportunities (combining multiple operators into a single kernel, for example, combining matmul+relu), or algorithmic changes (such as online softmax). You are only limited by your imagination.

Here's an example to show you the syntax of inline embedding custom CUDA operators in torch: The example given architecture is:

```
{EXAMPLE_MODEL}```

The example new arch with custom CUDA kernels looks like this:

```
{EXAMPLE_MODEL_NEW}```

You are given the following architecture:

```
{task.problem_source.rstrip()}
```
{training}
How it is judged: the output must match an fp64 reference within atol={task.tolerance.atol:g}, rtol={task.tolerance.rtol:g} on several fresh random inputs (including inputs drawn from other distributions than get_inputs), with the exact output shape and dtype; the kernel must not call these operators: {forbidden}; it is timed against PyTorch eager and torch.compile on the same GPU.

Optimize the architecture named Model with custom CUDA operators! Name your optimized output architecture ModelNew. Output the new code in codeblocks. Please generate real code, NOT pseudocode, make sure the code compiles and is fully functional. Just output the new model code, no other text, and NO testing code!
"""
