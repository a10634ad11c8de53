"""One module per `recscale` sub-command. Each defines `add_arguments(parser)` and `run(args) -> int`; its
docstring is the command's --help description (the one-line help is in `cli.main.COMMANDS`)."""
