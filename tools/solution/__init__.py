"""The solution unit: the text a model writes -> its language (language.py) -> the kernel file in a
reply and its launch plan (parse.py over plan_toml.py, plan.py) -> the source policy (cuda_policy.py
over source_scan.py) -> the plan resolved for a workload and GPU (plan_resolve.py, expr.py).
Nothing here imports torch or the CUDA driver."""
