"""Analysis of a sweep folder (runs.parquet, sweep.yaml's `analysis:` section, per-run files when present) into
report.md, analysis.json and plots/ (docs/analysis.md). Entry point: `analysis.pipeline.analyze(folder)`."""
