"""`python -m cli ARGS` runs the `recscale` command line (the malloc re-exec of `train`, `bench` and
`sweep` restarts the process this way)."""
import sys

from cli.main import main

sys.exit(main())
