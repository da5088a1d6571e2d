r"""KL divergence through CuPy's RawKernel, as a model writes it when it reaches for CuPy: the kernel string is
compiled by NVRTC on the first call, inside the device hold, and is not a kernel language the judge judges. Refused
before any build whether CuPy is installed on the host or not.

expect: compile_error
task: kl_div
diagnosis: imports cupy \(CuPy\), a kernel language this judge (does not judge|cannot run)
"""
import cupy as cp
import torch
import torch.nn as nn

_KERNEL = cp.RawKernel(r"""
extern "C" __global__ void kl_div_rows(const float* p, const float* t, float* out, long n) {
    __shared__ float part[256];
    float acc = 0.f;
    for (long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float ti = t[i];
        if (ti > 0.f) acc += ti * (logf(ti) - logf(p[i]));
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}
""", "kl_div_rows")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        p, t = predictions.contiguous(), targets.contiguous()
        out = torch.zeros(1, device=p.device, dtype=torch.float32)
        n = p.numel()
        _KERNEL((1024,), (256,), (cp.asarray(p), cp.asarray(t), cp.asarray(out), cp.int64(n)))
        return out[0] / p.shape[0]
