"""Small native kernels built on first use with the machine's C compiler (cached per CPU).

bf16_gemv.c  y = W x + b with W in bfloat16, x and y in float32, for one-token decode
native.py    builds a kernel into the artefact cache and opens it with ctypes
"""
