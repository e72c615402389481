"""The run records: typed trajectory events (events.py) written and read through one module
(rundir.py, trajectory.py), the run manifest (manifest.py), key redaction (redact.py) and the
SQLite checkpoints (checkpoint_store.py, checkpoint_guard.py)."""
