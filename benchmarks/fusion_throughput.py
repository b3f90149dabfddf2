"""fusion_throughput: F fused models vs the same F models trained one after another.

Two workloads on scikit-learn's 8x8 digits, torch on 2 threads, batch 128, F = 16:

* an MLP 64-256-256-10 (ReLU), goal >= 3x the training samples/s of 16 sequential models;
* a small CNN with BatchNorm (conv 1->16, BN, ReLU, conv 16->32, BN, ReLU, max-pool,
  linear 512->10), goal >= 1.5x.

One "round" trains every member one step (SGD with momentum): the fused model takes one
step, the sequential side 16. Fused and sequential rounds alternate in one process, so
machine load hits both alike; the ratio is the median over blocks.

It also trains the MLP fused and separately for 50 steps — SGD with momentum and weight
decay, and Adam — with a different learning rate per member, and reports the largest
absolute difference of any parameter (goal <= 1e-5, float32), with the implementations the
layers choose and, for Adam, with the per-member loop (torch's own kernels).

Run: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/fusion_throughput.py [--members 16]``.
``--device cuda`` runs both sides on a GPU (timed after ``torch.cuda.synchronize``) with
goals of its own: MLP >= 5x, CNN >= 3x, and parity judged against a float64 reference of
the same training (``tests/fusion/reference.py``, SGD with momentum and Adam, TF32 off):
every fused parameter within 1e-5 of the reference, or no further from it than separate
float32 training is (on a GPU a batched matrix product rounds differently from F single
ones, and Adam scales each gradient by its own running size, so fused-vs-separate can part
by more than rounding while both are right). The JSON line names the device.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from _results import record  # benchmarks/_results.py: notes the load at start
from torch import nn

from nbtune.examples.digits import load_data
from nbtune.fusion import fuse, fused_loss, fused_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fusion.reference

# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = ("nbtune/fusion/", "nbtune/examples/digits.py")
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine
RUNS_ON = ("cpu", "gpu")  # devices it has a mode for (default: cpu)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256),
                         nn.ReLU(), nn.Linear(256, 10))


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                         nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1, bias=False),
                         nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 16, 10))


DEVICE = torch.device("cpu")


def sync() -> None:
    """Wait for the device: GPU kernels run asynchronously, so a host clock needs this."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def batches(x: torch.Tensor, y: torch.Tensor, bs: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x, y = x.to(DEVICE), y.to(DEVICE)
    while True:
        order = torch.randperm(len(x), generator=gen)
        for i in range(0, len(order) - bs + 1, bs):
            idx = order[i:i + bs]
            yield x[idx], y[idx]


def lrs(f: int) -> list[float]:
    return [0.01 * (1 + k % 4) for k in range(f)]


def train_flops_per_sample(make) -> float:
    """Floating-point operations one training sample costs the model: 3x its forward's
    multiply-adds in Linear and Conv2d layers (forward, gradient of the input, gradient of
    the weight; norms, activations and the optimizer are left out). What the samples/s
    figures are worth in GFLOP/s: a side that reaches the machine's matmul rate cannot be
    made faster by fusing, only one that pays per-operation overhead."""
    model, flops = make(), [0.0]

    def count(mod, inp, out) -> None:
        if isinstance(mod, nn.Linear):
            flops[0] += 2.0 * mod.in_features * mod.out_features
        elif isinstance(mod, nn.Conv2d):
            kh, kw = mod.kernel_size
            flops[0] += (2.0 * out.shape[1] * out.shape[2] * out.shape[3]
                         * mod.in_channels // mod.groups * kh * kw)

    hooks = [m.register_forward_hook(count) for m in model.modules()
             if isinstance(m, nn.Linear | nn.Conv2d)]
    with torch.no_grad():
        model(torch.zeros(1, 1, 8, 8))
    for h in hooks:
        h.remove()
    return 3.0 * flops[0]


def throughput(make, f: int, bs: int, rounds: int, blocks: int) -> dict:
    """Samples/s of fused vs sequential training, alternating blocks of ``rounds`` rounds."""
    x, y, _, _ = load_data()
    torch.manual_seed(0)
    models = [make().to(DEVICE) for _ in range(f)]
    fm = fuse([copy.deepcopy(m) for m in models])
    fopt = fused_optimizer(torch.optim.SGD, fm, lr=lrs(f), momentum=0.9)
    opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
            for m, lr in zip(models, lrs(f), strict=True)]
    data = batches(x, y, bs, 0)

    def fused_round() -> None:
        xb, yb = next(data)
        total, _ = fused_loss(F.cross_entropy, fm(xb), yb)
        fopt.zero_grad()
        total.backward()
        fopt.step()

    def sequential_round() -> None:
        xb, yb = next(data)
        for m, o in zip(models, opts, strict=True):
            o.zero_grad()
            F.cross_entropy(m(xb), yb).backward()
            o.step()

    for _ in range(3):  # warm-up; the fused layers measure their implementations here
        fused_round()
        sequential_round()
    fused_t, seq_t = [], []
    for _ in range(blocks):
        for fn, acc in ((fused_round, fused_t), (sequential_round, seq_t)):
            sync()
            t0 = time.perf_counter()
            for _ in range(rounds):
                fn()
            sync()
            acc.append((time.perf_counter() - t0) / rounds)
    ratio = statistics.median(s / fu for s, fu in zip(seq_t, fused_t, strict=True))
    samples = f * bs
    gflop = train_flops_per_sample(make) / 1e9
    return {"fused_samples_per_s": samples / statistics.median(fused_t),
            "sequential_samples_per_s": samples / statistics.median(seq_t),
            "fused_gflops": gflop * samples / statistics.median(fused_t),
            "sequential_gflops": gflop * samples / statistics.median(seq_t),
            "speedup": ratio,
            "impls": sorted({v for _, op in fm.fused_ops() for v in op.chosen.values()})}


def equivalence(opt_cls, f: int, steps: int, impl: str = "auto", **hp) -> float:
    """Largest |fused - separate| over every parameter after ``steps`` steps."""
    x, y, _, _ = load_data()
    torch.manual_seed(1)
    models = [mlp().to(DEVICE) for _ in range(f)]
    fm = fuse([copy.deepcopy(m) for m in models], impl=impl)
    fopt = fused_optimizer(opt_cls, fm, lr=[lr / 10 for lr in lrs(f)], **hp)
    opts = [opt_cls(m.parameters(), lr=lr / 10, **hp)
            for m, lr in zip(models, lrs(f), strict=True)]
    data = batches(x, y, 128, 1)
    for _ in range(steps):
        xb, yb = next(data)
        total, _ = fused_loss(F.cross_entropy, fm(xb), yb)
        fopt.zero_grad()
        total.backward()
        fopt.step()
        for m, o in zip(models, opts, strict=True):
            o.zero_grad()
            F.cross_entropy(m(xb), yb).backward()
            o.step()
    worst = 0.0
    for k, m in enumerate(models):
        got = fm.defuse(k).state_dict()
        for name, want in m.state_dict().items():
            worst = max(worst, (got[name] - want).abs().max().item())
    return worst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=16)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda[:N] for a GPU")
    args = ap.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    torch.set_num_threads(args.threads)
    f = args.members

    res_mlp = throughput(mlp, f, args.batch, args.rounds, args.blocks)
    res_cnn = throughput(cnn, f, args.batch, max(2, args.rounds // 2), args.blocks)
    sgd = equivalence(torch.optim.SGD, f, 50, momentum=0.9, weight_decay=1e-4)
    adam = equivalence(torch.optim.Adam, f, 50)
    # the per-member loop runs torch's own kernels: bitwise the separate computation
    adam_loop = equivalence(torch.optim.Adam, f, 50, impl="loop")
    for name, r in (("MLP 64-256-256-10", res_mlp), ("CNN + BatchNorm", res_cnn)):
        print(f"{name}: fused {r['fused_samples_per_s']:,.0f} samples/s, sequential "
              f"{r['sequential_samples_per_s']:,.0f} samples/s ({r['fused_gflops']:.1f} / "
              f"{r['sequential_gflops']:.1f} GFLOP/s), speedup {r['speedup']:.2f}x "
              f"(implementations chosen: {', '.join(r['impls'])})")
    print(f"50 steps, max |fused - separate| over all parameters: SGD-momentum {sgd:.2e}, "
          f"Adam {adam:.2e} (per-member loop implementation: {adam_loop:.2e})")
    on_gpu = DEVICE.type == "cuda"
    if on_gpu:
        goal = {"mlp_speedup": 5.0, "cnn_speedup": 3.0,
                "reference": "every fused parameter within 1e-5 of float64, or no further "
                             "than separate float32"}
    else:
        goal = {"mlp_speedup": 3.0, "cnn_speedup": 1.5, "max_param_diff": 1e-5}
    figures = {"mlp_speedup": round(res_mlp["speedup"], 3),
               "cnn_speedup": round(res_cnn["speedup"], 3),
               "mlp_fused_samples_per_s": round(res_mlp["fused_samples_per_s"]),
               "mlp_sequential_samples_per_s": round(res_mlp["sequential_samples_per_s"]),
               "cnn_fused_samples_per_s": round(res_cnn["fused_samples_per_s"]),
               "cnn_sequential_samples_per_s": round(res_cnn["sequential_samples_per_s"]),
               # 3x the forward's Linear/Conv2d multiply-adds per sample (see
               # train_flops_per_sample): how near each side is to the machine's matmul rate
               "mlp_fused_gflops": round(res_mlp["fused_gflops"], 2),
               "mlp_sequential_gflops": round(res_mlp["sequential_gflops"], 2),
               "cnn_fused_gflops": round(res_cnn["fused_gflops"], 2),
               "cnn_sequential_gflops": round(res_cnn["sequential_gflops"], 2),
               "sgd_max_param_diff": sgd, "adam_max_param_diff": adam,
               "adam_max_param_diff_loop": adam_loop,
               "members": f, "batch": args.batch, "threads": args.threads,
               "device": torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "cpu"}
    fast = (res_mlp["speedup"] >= goal["mlp_speedup"]
            and res_cnn["speedup"] >= goal["cnn_speedup"])
    if on_gpu:
        from tests.fusion.reference import errors

        parity = True
        for kind in ("SGD", "Adam"):
            errs = errors(DEVICE, kind)
            fused, sep = max(e.fused for e in errs), max(e.separate for e in errs)
            figures[f"{kind.lower()}_fused_vs_float64"] = fused
            figures[f"{kind.lower()}_separate_vs_float64"] = sep
            parity = parity and all(e.ok() for e in errs)
            print(f"{kind} against a float64 reference (40 steps, 4 members): fused {fused:.2e}, "
                  f"separate {sep:.2e}")
        met = fast and parity
    else:
        met = fast and max(sgd, adam) <= goal["max_param_diff"]
    record({"name": "fusion_throughput", "figures": figures, "goal": goal,
            "met": met}, gpu=on_gpu)


if __name__ == "__main__":
    main()
