"""report.md, analysis.json and the figures: one module per report section, the text formatting they share,
the writer that puts report.md and the terminal summary together, and the summary written as analysis.json."""
