"""`ptxbench workloads`: list the workload registry."""
