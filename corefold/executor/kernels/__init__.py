"""NumPy kernels, one module per op family; each registers with ``@kernel("Op")``."""
