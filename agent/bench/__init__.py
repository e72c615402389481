"""The benchmark: a matrix of trajectories (matrix.py) scheduled over a thread pool (scheduler.py),
run and retried after infra failures (runner.py, retry.py), and recorded kernels evaluated again
(reevaluate.py). The Ray evaluator lives beside the local one, in tools/ray_evaluator.py."""
