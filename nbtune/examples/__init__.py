"""Runnable examples that ship with nbtune (importable by Dask workers' trial processes)."""
