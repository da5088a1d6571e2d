"""A KernelBench-style generation prompt for a task and a kernel language: the instruction, one worked example
in that language, the problem.

It follows KernelBench's one-shot prompt (an elementwise-add `Model` and its `load_inline` `ModelNew`),
and adds what this judge checks so a model is not surprised by its verdict. The other languages
(sandbox/languages.py: Triton, CuTe DSL, TileLang) get the same prompt with the same elementwise add written
in their style; each example was compiled for sm_90a with the pinned versions (pyproject's [languages] extra).

`cpp` is the CPU's own language: C++ built with torch's cpp extension (`load_inline` with `cpp_sources` alone),
which the judge builds and runs on a CPU device as it does CUDA C++ on a GPU (sandbox/languages.py counts it as
the "cuda" language: C++ extensions built with torch.utils.cpp_extension; tests/corpus/cpu holds such kernels). Its
prompt names the size the CPU judges (the task's `cpu_shape`), not get_inputs' GPU size.
"""

from __future__ import annotations

from reference import Task
from sandbox.shared.languages import BY_ID

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


EXAMPLE_CPP = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

elementwise_add_source = """
torch::Tensor elementwise_add_cpu(torch::Tensor a, torch::Tensor b) {
    auto a_c = a.contiguous();
    auto b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    const float* pa = a_c.data_ptr<float>();
    const float* pb = b_c.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t size = a_c.numel();
    for (int64_t i = 0; i < size; ++i) {
        po[i] = pa[i] + pb[i];
    }
    return out;
}
"""

elementwise_add = load_inline(
    name="elementwise_add",
    cpp_sources=elementwise_add_source,
    functions=["elementwise_add_cpu"],
    extra_cflags=["-O2"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cpu(a, b)
'''


EXAMPLE_TRITON = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
        return out
'''

EXAMPLE_CUTE = '''import torch
import torch.nn as nn
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def add_kernel(gA: cute.Tensor, gB: cute.Tensor, gOut: cute.Tensor, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * 256 + tidx
    if i < n:
        gOut[i] = gA[i] + gB[i]


@cute.jit
def add(mA: cute.Tensor, mB: cute.Tensor, mOut: cute.Tensor, n: cutlass.Int32):
    add_kernel(mA, mB, mOut, n).launch(grid=[(n + 255) // 256, 1, 1], block=[256, 1, 1])


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.compiled = {}

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        args = (from_dlpack(a.view(-1)), from_dlpack(b.view(-1)), from_dlpack(out.view(-1)), a.numel())
        if a.shape not in self.compiled:  # cute.compile specialises on the tensors' shapes: once per shape
            self.compiled[a.shape] = cute.compile(add, *args)
        self.compiled[a.shape](*args)
        return out
'''

EXAMPLE_TILELANG = '''import torch
import torch.nn as nn
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[2])
def elementwise_add(n, block=1024, dtype="float32"):
    @T.prim_func
    def add(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=256) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    C[bx * block + i] = A[bx * block + i] + B[bx * block + i]

    return add


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        kernel = elementwise_add(a.numel())  # compiled on the first call for each size, then cached
        return kernel(a.contiguous().view(-1), b.contiguous().view(-1)).view_as(a)
'''

EXAMPLES = {"cuda": EXAMPLE_MODEL_NEW, "cpp": EXAMPLE_CPP, "triton": EXAMPLE_TRITON, "cute": EXAMPLE_CUTE,
            "tilelang": EXAMPLE_TILELANG}
"""The worked example per prompt language (sandbox/languages.py ids, and `cpp`): the same elementwise add in each."""

LANGUAGES = tuple(EXAMPLES)
"""The languages a prompt can be asked for."""

ON_CPU = ("cpp",)
"""Prompt languages whose kernels run on the CPU: judged at the task's CPU size, timed on the CPU."""

KERNELS = {"cuda": "custom CUDA kernels", "cpp": "custom C++ CPU kernels", "triton": "custom Triton kernels",
           "cute": "custom CuTe DSL kernels", "tilelang": "custom TileLang kernels"}
"""How the instruction names the kernels it asks for."""

HOW = {"cuda": "inline embedding custom CUDA operators in torch",
       "cpp": "inline embedding custom C++ operators for the CPU in torch (load_inline with cpp_sources only, no "
              "CUDA)",
       "triton": "writing custom Triton kernels (@triton.jit) called from torch",
       "cute": "writing custom CuTe DSL kernels (nvidia-cutlass-dsl: @cute.kernel, launched from a @cute.jit "
               "function compiled with cute.compile) called on torch tensors",
       "tilelang": "writing custom TileLang kernels (@T.prim_func, compiled with @tilelang.jit) called on torch "
                   "tensors"}


def _own_kernels(language: str) -> str:
    """What the judge requires of the candidate's own code, beyond CUDA C++ (KernelBench's prompt says nothing)."""
    if language == "cuda":
        return ""
    if language == "cpp":
        return "; the work must be done by C++ that the module builds itself with load_inline (cpp_sources, no CUDA)"
    return f"; the kernels must be {BY_ID[language].name} that the module defines"


def _where_timed(task: Task, language: str) -> str:
    if language not in ON_CPU:
        return "on the same GPU"
    judged, official = (" x ".join(map(str, shape)) for shape in (task.cpu_shape, task.official_shape))
    return f"on the same CPU, at the task's CPU size (inputs of shape {judged} instead of get_inputs' {official})"


def generation_prompt(task: Task, language: str = "cuda") -> str:
    """The prompt for `task` in `language` (one of LANGUAGES; KeyError for another)."""
    kernels, example, how = KERNELS[language], EXAMPLES[language], HOW[language]
    operators = {"cuda": "custom CUDA operators", "cpp": "custom C++ CPU operators"}.get(language, kernels)
    example_model = EXAMPLE_MODEL.replace(".cuda()", "") if language in ON_CPU else EXAMPLE_MODEL
    forbidden = ", ".join(sorted(task.forbidden_aten_ops)) or "none"
    training = f"\n{task.training.statement}\n" if task.training else ""
    return f"""You write {kernels} to replace the pytorch operators in the given architecture to get speedups.

You have complete freedom to choose the set of operators you want to replace. You may make the decision to replace some operators with {kernels} and leave others unchanged. You may replace multiple operators with custom implementations, consider operator fusion opportunities (combining multiple operators into a single kernel, for example, combining matmul+relu), or algorithmic changes (such as online softmax). You are only limited by your imagination.

Here's an example to show you the syntax of {how}: The example given architecture is:

```
{example_model}```

The example new arch with {kernels} looks like this:

```
{example}```

You are given the following architecture:

```
{task.problem_source.rstrip()}
```
{training}
How it is judged: the output must match an fp64 reference within atol={task.tolerance.atol:g}, rtol={task.tolerance.rtol:g} on several fresh random inputs (including inputs drawn from other distributions than get_inputs), with the exact output shape and dtype; the kernel must not call these operators: {forbidden}{_own_kernels(language)}; it is timed against PyTorch eager and torch.compile {_where_timed(task, language)}.

Optimize the architecture named Model with {operators}! Name your optimized output architecture ModelNew. Output the new code in codeblocks. Please generate real code, NOT pseudocode, make sure the code compiles and is fully functional. Just output the new model code, no other text, and NO testing code!
"""
