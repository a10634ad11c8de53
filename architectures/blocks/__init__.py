"""Shared layers composed by the model files (never registered as models themselves); what each module holds:
docs/architectures.md, "Shared blocks".
"""
