"""Shared layers composed by the model files: tokenizers, Wukong, HSTU, fusion, MPTF and heads."""
