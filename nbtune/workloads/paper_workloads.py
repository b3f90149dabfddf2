"""The simulated jobs of the papers' experiments: Fluid's CIFAR-10 search, HyperSack's SP1 grid.

In the package (not only in ``benchmarks/``) because the notebooks and the
benchmarks run the same jobs, and a notebook must work when copied out of the
repository. Numbers and their sources are documented in benchmarks/README.md.
"""

from __future__ import annotations

from typing import Any

from nbtune.core.resources import Demand
from nbtune.core.space import choice, grid, loguniform, uniform
from nbtune.workloads.interference import InterferenceWorkload
from nbtune.workloads.synthetic import SyntheticWorkload

__all__ = ["CIFAR_SPACE", "CIFAR_ALPHA", "CIFAR_BETA", "CIFAR_EPS", "CIFAR_LAUNCH",
           "cifar_epoch", "cifar_util", "cifar10_util", "cifar10", "SP1_MODELS", "SP1_SPACE",
           "sp1_util", "sp1"]

# ----------------------------------------------------------------- CIFAR-10 (Fluid §6.1)
CIFAR_SPACE = {
    "conv_layers": choice([2, 3, 4]),  # 3 architecture parameters
    "conv_width": choice([32, 64, 128]),
    "fc_units": choice([256, 512, 1024]),
    "lr": loguniform(1e-4, 1e-1),  # 4 training parameters
    "batch_size": choice([64, 128, 256, 512]),
    "momentum": uniform(0.5, 0.99),
    "weight_decay": loguniform(1e-6, 1e-3),
}
CIFAR_ALPHA = 1.24  # ResNet-18 under MPS, fitted from resnet18_mps.csv (see README)
CIFAR_BETA = 1.15  # AlexNet's large FC layers over 10G ethernet; < 1 + 1/d for d = 4
CIFAR_EPS = 5.0  # seconds per resize: checkpoint a small model, restart workers
CIFAR_LAUNCH = 5.0


def cifar_epoch(cfg: dict[str, Any]) -> float:
    """Seconds per epoch on one RTX 6000: grows with depth and width, small batches slower."""
    base = 6.0 * (1 + 0.35 * (cfg["conv_layers"] - 2)) * (cfg["conv_width"] / 64) ** 0.5
    return base * (128 / cfg["batch_size"]) ** 0.4 * (1 + cfg["fc_units"] / 4096)


def cifar_util(cfg: dict[str, Any]) -> float:
    """GPU busy fraction alone: Fluid §2.2.1 sees one CIFAR-10 trial use at most 60 % of a GPU."""
    busy = 0.3 + 0.1 * (cfg["conv_width"] / 64) ** 0.5 * (cfg["batch_size"] / 128) ** 0.3
    return min(0.6, busy)


def cifar10_util(seed: int) -> InterferenceWorkload:
    """The same trials, packed by their measured busy fraction instead of a saturating α."""
    return InterferenceWorkload(
        CIFAR_SPACE, unit_time=cifar_epoch, unit_time_jitter=0.2, beta=CIFAR_BETA,
        launch_overhead=CIFAR_LAUNCH, max_budget_hint=27, seed=seed,
        demand=lambda c: Demand(compute=cifar_util(c), memory_gb=2.0, cpus=2.0),
    )


def cifar10(seed: int) -> SyntheticWorkload:
    return SyntheticWorkload(CIFAR_SPACE, unit_time=cifar_epoch, unit_time_jitter=0.2,
                             alpha=CIFAR_ALPHA, beta=CIFAR_BETA, launch_overhead=CIFAR_LAUNCH,
                             max_budget_hint=27, seed=seed)


# ------------------------------------------------------------ SP1 (HyperSack §V-A, Table II)
SP1_MODELS = {  # model -> (GPU busy fraction at batch 128 on an A100, seconds/epoch at 128)
    "shufflenet": (0.22, 11.0), "mobilenet": (0.28, 10.0), "vit_tiny": (0.34, 14.0),
    "deit_tiny": (0.38, 15.0), "resnet18": (0.44, 9.0), "resnet34": (0.50, 13.0),
}
SP1_SPACE = {"model": grid(list(SP1_MODELS)), "batch_size": grid([64, 128, 256, 512]),
             "lr": grid([1e-5, 1e-4, 1e-3, 1e-1])}


def sp1_util(cfg: dict[str, Any]) -> float:
    return min(max(SP1_MODELS[cfg["model"]][0] * (cfg["batch_size"] / 128) ** 0.1, 0.22), 0.5)


def sp1() -> InterferenceWorkload:
    return InterferenceWorkload(
        SP1_SPACE, rho=1.46, gamma=0.09, alpha=1.0, beta=1.1, launch_overhead=10.0,
        unit_time=lambda c: SP1_MODELS[c["model"]][1] * (128 / c["batch_size"]) ** 0.5,
        demand=lambda c: Demand(compute=sp1_util(c), memory_gb=2.0 + c["batch_size"] / 128,
                                cpus=4.0),
    )
