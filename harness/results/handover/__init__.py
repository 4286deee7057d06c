"""A report to hand over: one self-contained HTML file (chart library, data and styles inline)
for a run or a comparison of runs, and the Markdown of a run's verdict and levels. `document`
builds the HTML from summaries (pure), `sources` reads what it needs from a results file."""
