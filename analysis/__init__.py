"""Analysis of sweep results: scaling-law fits, seed variance and significance per ablation, plots, report.

Reads only files under a sweep folder (runs.parquet, sweep.yaml's optional `analysis:` section, each run's
metrics.json and predictions), so it works on results copied from another machine. Entry point:
`analysis.pipeline.analyze(folder)`, or `recscale analyze folder` on the command line.
"""
