"""The bottom layer, imported by every other package and importing none of them: the name registry
(`registry`), the discovery of component files (`discovery`), typed config dataclasses loaded from YAML
(`typed_config`), the user-facing error base (`errors`), every results, run and artifact file name
(`results_layout`) and the atomic file writer (`atomic_write`). Layers, lowest first: core < protocols <
architectures < harness < analysis < cli (docs/architecture.md; tests/test_layering.py checks it)."""
