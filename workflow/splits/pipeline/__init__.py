"""What the Snakefile itself runs: the start checks, the targets and argument lookups, the run lock."""
