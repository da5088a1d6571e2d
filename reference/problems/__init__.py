"""The KernelBench problem modules, verbatim: exactly the text an LLM is shown."""
