"""The `recscale` command line, the top layer: `cli.main` dispatches to one module per command under
`cli.commands`. It may import every other package; none imports it (tests/test_layering.py)."""
