"""The on-disk contract between the worker, the runner and every reader, stdlib only: atomic
file writes (`io`), the versioned schema with its statuses, stages and units (`schema`), and every
path in a run folder (`layout.RunLayout`)."""
