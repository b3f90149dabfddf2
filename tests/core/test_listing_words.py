"""Issue #27: the words a person reads fit the hardware, "GPUs" only on GPUs.

Every list of experiments (the sidebar from a store or a kernel, ``nbtune``'s
command line) takes its words from :func:`nbtune.core.resources.device_noun`
and says what the lanes are from :func:`nbtune.core.resources.device_of`.
"""

from __future__ import annotations

from nbtune.core.listing import experiment_summary
from nbtune.core.resources import ClusterSpec, device_noun, device_of


def summary(**kw):
    return experiment_summary(name="x", state="running", algorithm="asha", metric="loss",
                              mode="min", trial_ids=[0, 1], states=["running", "running"],
                              values=[None, None], budgets=[0, 0], planned=4, **kw)


def test_device_of_a_cluster():
    assert device_of(ClusterSpec.homogeneous(2)) == "GPU"
    assert device_of(ClusterSpec.homogeneous(2, kind="A100")) == "GPU"
    assert device_of(ClusterSpec.homogeneous(2, kind="cpu")) == "CPU"
    assert device_of(None) is None


def test_device_noun_says_gpus_only_on_gpus():
    assert [device_noun("GPU", n) for n in (0, 1, 3)] == ["0 GPUs", "1 GPU", "3 GPUs"]
    assert [device_noun("CPU", n) for n in (0, 1, 2)] == [
        "0 CPU workers", "1 CPU worker", "2 CPU workers"]
    assert device_noun(None, 2) == device_noun("mixed", 2) == "2 workers"


def test_a_summary_carries_its_device_and_words_keeping_the_old_field():
    cpu = summary(gpus_in_use=2, device="CPU")
    assert cpu["gpus_in_use"] == 2  # the field older clients read is still there
    assert cpu["device"] == "CPU" and cpu["in_use"] == "2 CPU workers"
    gpu = summary(gpus_in_use=2, device="GPU")
    assert gpu["device"] == "GPU" and gpu["in_use"] == "2 GPUs"
    unknown = summary(gpus_in_use=1)
    assert unknown["device"] is None and unknown["in_use"] == "1 worker"
