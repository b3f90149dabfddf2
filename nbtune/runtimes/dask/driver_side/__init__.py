"""What runs in the driver, the user's kernel or script: ``DaskRuntime``, its driver thread and
what that thread owns (inbox, membership, run driver, launches, links to the workers).

Imports nothing itself: each module is imported where it is used.
"""
