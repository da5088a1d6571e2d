"""As many models write it: the extension is built inside `ModelNew.__init__`, not at import. The build stage
constructs ModelNew once so that it is built there; the execution child, which never builds, then finds it up
to date (issue 24). Honest: torch alone builds and runs it.

expect: correct
task: cross_entropy
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>

torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    const float* xp = x.data_ptr<float>();
    const int64_t* tp = t.data_ptr<int64_t>();
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = xp + r * cols;
        float m = *std::max_element(row, row + cols);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp((double)row[c] - (double)m);
        total += std::log(s) + (double)m - (double)row[tp[r]];
    }
    return torch::full({}, (float)(total / (double)rows), x.options());
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline(name="cross_entropy_init_build", cpp_sources=cpp_source,
                               functions=["cross_entropy_forward"], verbose=False)

    def forward(self, predictions, targets):
        return self.ext.cross_entropy_forward(predictions, targets)
