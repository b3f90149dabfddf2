"""Assembling a run: its options (:mod:`.run_options`), checked before anything starts
(:mod:`.run_checks`), put together and started (:mod:`.assemble`).

``tune``, ``resume``, the ``%%tune`` magic, the demos and the simulator replay all build
their experiments here, so the defaults and the rules of a start are written once.
"""

from __future__ import annotations

from nbtune.build.assemble import (
    build_experiment,
    build_run,
    check_trainable,
    make_engine,
    make_policies,
    make_runtime,
    ran_on,
    resumed_runtime,
    runtime_class,
    wrap_surrogates,
)
from nbtune.build.run_checks import MAX_FUSION, check_mode, check_run, fusion_width
from nbtune.build.run_options import (
    OPTION_GROUPS,
    ExecutionOptions,
    OptionGroup,
    RecordingOptions,
    ResourceOptions,
    RunSpec,
    SearchOptions,
    merge_options,
)

__all__ = [
    "build_run", "build_experiment", "make_engine", "make_policies", "make_runtime",
    "ran_on", "resumed_runtime", "runtime_class", "wrap_surrogates", "check_trainable", "check_mode",
    "check_run", "fusion_width", "MAX_FUSION", "OPTION_GROUPS", "OptionGroup", "RunSpec", "SearchOptions",
    "ResourceOptions", "ExecutionOptions", "RecordingOptions", "merge_options",
]
