"""The bottom layer, imported by every other package and importing none of them; what each module owns and the
layers above it: docs/architecture.md (tests/test_layering.py checks the layers)."""
