"""The CPU's compute backends beside the numpy reference, each gated at start like the GPU's
(``daisychain.gpu``): ``int8`` (exact int8 products on the CPU's integer units, through
onnxruntime) and ``fused`` (the elementwise passes around them in numba; ``fused_kernels`` holds
its loops and is imported only where numba is installed).
"""
