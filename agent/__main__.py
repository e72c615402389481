"""`python -m ptxbench.agent ...` runs the `ptxbench` command (for machines without the console script)."""
from .cli import main

main()
