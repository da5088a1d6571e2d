"""Model-style cross_entropy built with `extra_cflags=["-std=c++14"]`, which torch's headers refuse.

Seen in a real sample: its build failed, the judge went on to execution anyway, and `load_inline` in the GPU
child compiled again until the sandbox's wall limit, holding the GPU for 301 s (issue 24). It must be a
`compile_error` from the build stage, with no device time. The file also carries what models often append
(the task's sizes and `get_inputs`).

expect: compile_error
task: cross_entropy
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void ce_kernel(const float* logits, const long* targets, float* losses, int n, int c) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const float* x = logits + (long)row * c;
    float m = x[0];
    for (int j = 1; j < c; ++j) m = fmaxf(m, x[j]);
    float s = 0.f;
    for (int j = 0; j < c; ++j) s += expf(x[j] - m);
    losses[row] = logf(s) + m - x[targets[row]];
}

torch::Tensor ce_cuda(torch::Tensor logits, torch::Tensor targets) {
    int n = logits.size(0), c = logits.size(1);
    auto losses = torch::empty({n}, logits.options());
    ce_kernel<<<(n + 255) / 256, 256>>>(logits.data_ptr<float>(), targets.data_ptr<long>(),
                                        losses.data_ptr<float>(), n, c);
    return losses.mean();
}
"""

cpp_source = "torch::Tensor ce_cuda(torch::Tensor logits, torch::Tensor targets);"

ce = load_inline(name="ce_cxx14", cpp_sources=cpp_source, cuda_sources=source, functions=["ce_cuda"],
                 extra_cflags=["-std=c++14"], extra_cuda_cflags=["-std=c++14"], verbose=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return ce.ce_cuda(predictions.contiguous(), targets.contiguous())


batch_size = 32768
num_classes = 4096
input_shape = (num_classes,)
dim = 1


def get_inputs():
    return [torch.rand(batch_size, *input_shape).cuda(), torch.randint(0, num_classes, (batch_size,)).cuda()]


def get_init_inputs():
    return []
