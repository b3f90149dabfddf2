"""What runs in a trial process (or a worker's trial thread): the process's entry point and
the ``Trial`` a training function receives.

Kept light: a trial process imports this package before the user's code, so nothing here
imports ``distributed``, pandas or the engine.
"""
