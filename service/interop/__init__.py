"""Interoperability with other kernel-benchmark tooling (KernelBench run directories and eval results)."""
