"""E4M3 byte -> float32 decode: numpy reference and Triton helpers/kernels."""
