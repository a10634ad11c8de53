"""One module per `recscale` sub-command. Each defines `add_arguments(parser)` and `run(args) -> int`;
the module docstring's first line is the command's one-line help."""
