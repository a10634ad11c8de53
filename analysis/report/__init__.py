"""report.md, analysis.json, the figures and the terminal summary: one module per report section (docs/analysis.md)."""
