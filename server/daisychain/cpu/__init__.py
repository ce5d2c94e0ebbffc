"""The CPU's compute backends beside the numpy reference, each gated at start like the GPU's
(``daisychain.gpu``): ``int8`` (exact int8 products on the CPU's integer units, through
onnxruntime, where the CPU has VNNI-class int8 dot-product units), ``madd`` (exact int8
products on the 16-bit multiply-adds any CPU has, in numba; ``madd_kernels`` holds its loop)
and ``fused`` (the elementwise passes around them in numba; ``fused_kernels`` holds
its loops and is imported only where numba is installed). ``gemmapi`` is what both GEMMs offer
the model and the gates around their own product.
"""
