"""As models write it: no extra_cflags at all, torch/extension.h again, helpers in a namespace, the
bindings from a `functions=` list.

expect: correct
task: cross_entropy
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cross_entropy_cpp_source = """
#include <torch/extension.h>
#include <cmath>
#include <limits>

namespace ce {
inline float row_max(const float* row, int64_t n) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) m = row[i] > m ? row[i] : m;
    return m;
}
}  // namespace ce

torch::Tensor cross_entropy_cpu(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    const float* xp = x.data_ptr<float>();
    const int64_t* tp = t.data_ptr<int64_t>();
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = xp + r * cols;
        const float m = ce::row_max(row, cols);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp((double)(row[c] - m));
        total += (double)m + std::log(s) - (double)row[tp[r]];
    }
    return torch::full({}, (float)(total / (double)rows), x.options());
}
"""

cross_entropy = load_inline(
    name="cross_entropy_no_flags",
    cpp_sources=cross_entropy_cpp_source,
    functions=["cross_entropy_cpu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cross_entropy = cross_entropy

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.cross_entropy.cross_entropy_cpu(predictions, targets)
