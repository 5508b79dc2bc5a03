"""What a GPU kernel of PyTorch is, by its name: one rule for scripts/measure_layers.py (the kernel
classes of a profiled step) and scripts/validate_layers.py (Nsight Compute's kernels)."""


def kernel_kind(name):
    """PyTorch's kernel templates, by what decides their speed: "gemm", "attention" (a fused
    attention kernel), or a memory-bound kind."""
    n = name.lower()
    if "flash" in n:
        return "attention"
    if any(s in n for s in ("gemm", "cutlass", "nvjet", "xmma", "sm90_", "sm80_")):
        return "gemm"
    for pattern, kind in (("layer_norm", "layer norm"), ("gammabeta", "layer norm"), ("softmax", "softmax"),
                          ("dropout", "dropout"), ("reduce_kernel", "reduction"),
                          ("vectorized_elementwise_kernel", "elementwise, contiguous"),
                          ("unrolled_elementwise_kernel", "elementwise, dtype cast"),
                          ("elementwise_kernel<", "elementwise, strided or broadcast"),
                          ("catarraybatchedcopy", "cat"), ("nll_loss", "reduction")):
        if pattern in n:
            return kind
    return "other"


def kernel_class(name):
    """The split of a step's time: "gemm", "attention", or "other" (every memory-bound kind)."""
    kind = kernel_kind(name)
    return kind if kind in ("gemm", "attention") else "other"
