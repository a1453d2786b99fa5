"""fp8_ds_mla KV cache: layout constants, PyTorch reference writer/reader (naive)."""
