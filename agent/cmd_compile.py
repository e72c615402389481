"""`ptxbench compile`: assemble a solution file and report resources, SASS and targets."""
