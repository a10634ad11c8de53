"""Analysis of sweep results: headline table, seed variance and significance per comparison, scaling-law fits
against an external reference, family-vs-family comparisons, plots, report.

Reads only files under a sweep folder: runs.parquet and sweep.yaml's optional `analysis:` section, plus each
run's metrics.json and predictions when present (DeLong and the grouped metrics need them; a folder without
run folders is analysed in full otherwise). Entry point: `analysis.pipeline.analyze(folder)`, or
`recscale analyze folder` on the command line.
"""
