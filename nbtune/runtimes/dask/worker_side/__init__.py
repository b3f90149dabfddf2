"""What runs inside a Dask worker: nbtune's worker plugin, its handlers for the driver's
direct links, the warm pool of trial processes, each rank's process or thread, the
utilization sampler and the overhead probe.

Imports nothing itself: a worker unpickling the plugin imports only what the plugin needs.
"""
