"""SwiGLU with DeepSeek V4 alpha/limit: float64 oracle and torch version."""
