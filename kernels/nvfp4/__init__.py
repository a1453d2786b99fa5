"""NVFP4 reference (oracle) functions: E2M1 values, UE4M3 block scales over 16 values, FP32 global scale."""
