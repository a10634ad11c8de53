"""Harness: run configs, training loop, evaluation and metrics, checkpoints, FLOP accounting,
the Ray Tune sweep launcher and the `recscale` command line."""
