"""Fused float32 training against a float64 reference of the same training, SGD and Adam.

Runs on the CPU everywhere and on CUDA where torch sees a GPU: every fused parameter ends
within 1e-5 of the float64 reference, or no further from it than the same member trained
alone in float32 (:mod:`tests.fusion.reference`).
"""

from __future__ import annotations

import pytest
import torch

from .reference import ATOL, HPARAMS, assert_fused_matches_reference, errors, per_member

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="torch sees no CUDA device"))]


@pytest.mark.parametrize("kind", ["SGD", "Adam"])
@pytest.mark.parametrize("device", DEVICES)
def test_fused_training_is_as_close_to_a_float64_reference_as_separate(device, kind):
    errs = errors(device, kind)
    assert len(errs) == 4 * 6  # four members, three Linear layers' weight and bias
    # the training is no no-op: every parameter moved far beyond the bound it is held to
    assert min(e.moved for e in errs) > 100 * ATOL
    assert_fused_matches_reference(errs)


WRONG = [("SGD", 1, "lr", 0.05 * 1.01), ("SGD", 2, "momentum", 0.85),
         ("SGD", 2, "weight_decay", 0.0),
         ("Adam", 1, "lr", 3e-3 * 1.01), ("Adam", 3, "eps", 1e-8), ("Adam", 1, "beta2", 0.999),
         ("Adam", 2, "weight_decay", 0.0)]


@pytest.mark.parametrize(("kind", "member", "name", "value"), WRONG)
def test_one_wrong_member_hyperparameter_in_the_fused_optimizer_is_caught(kind, member, name,
                                                                         value):
    """The comparison fails when fusion trains one member not as it would train alone."""
    hp = per_member(HPARAMS[kind])
    hp[name][member] = value
    errs = errors("cpu", kind, fused_hparams=hp)
    bad = {(e.member, e.name) for e in errs if not e.ok()}
    assert bad and {m for m, _ in bad} == {member}
    with pytest.raises(AssertionError, match=f"member {member} "):
        assert_fused_matches_reference(errs)
