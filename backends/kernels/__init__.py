"""Small native kernels built on first use with the machine's C compiler (cached per CPU).

gemv.c       y = W x + b, W float32 or bfloat16, x and y float32: one-token decode's products
native.py    builds a kernel into the artefact cache and opens it with ctypes
"""
