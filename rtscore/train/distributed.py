"""One seed on several devices (guide §9.1: "DDP ... code structured to allow DDP addition later"): the ranks of a
seed, their process group, batch norm across ranks, and the collectives the loop needs.

Each of N ranks trains ``training.batch_size`` tiles a step (the guide's per-GPU batch, §9.1), so one optimizer step
sees the effective batch of ``batch_size x N`` tiles. A seed on N ranks at ``batch_size`` b takes the steps of one
device at ``batch_size`` N x b, up to the order of floating-point sums:

- the effective batch is planned once by the sampler, as one device would plan it, and each rank reads its slice
  of ``batch_size`` tiles (:class:`rtscore.data.loading.sampler.BalancedCurriculumSampler`);
- batch norm in training mode normalises with the statistics of the effective batch (torch's ``SyncBatchNorm`` on
  CUDA, :class:`CrossRankBatchNorm` on CPU, where torch has none);
- every loss reduces over the effective batch (:func:`rtscore.losses.global_batch`), so the gradients DDP averages
  are those of the one-device loss at that batch;
- dropout, drop-path and drop-connect draw the effective batch's masks on every rank and keep their rows
  (:mod:`rtscore.train.stochastic`; a stochastic layer it does not know is refused at the start);
- validation shards the pool and gathers the per-tile histograms, which merge exactly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

from rtscore.config.pipeline import PipelineConfig
from rtscore.runtime import DeviceError, all_reduce

T = TypeVar("T")

COLLECTIVE_TIMEOUT_S = 600.0  # a rank that waits longer on the others fails the seed instead of hanging


@dataclass(frozen=True)
class Ranks:
    """Where this process stands among the ranks of one seed (one rank: the plain single-device loop)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0: the one that writes checkpoints, metrics, MLflow and logs."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls) -> Ranks:
        """The ranks torch's elastic launcher gives this process (RANK, WORLD_SIZE, LOCAL_RANK); one rank outside."""
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            return cls()
        return cls(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)))


SINGLE = Ranks()


def resolve_devices(cfg: PipelineConfig, devices: int | str | None = None, *, this_machine: bool = True) -> int:
    """The number of ranks N one seed takes on this machine: the one rule of training (its launcher), the
    batch-size profile and the GPU check, so a profile is made for the N that training will run.

    The count is ``devices`` when given (the profile's ``--devices``), else ``training.devices``:

    - a number N >= 1: N GPUs when the seed trains on CUDA (``training.device`` not cpu and a GPU visible),
      refused when this machine shows fewer (naming how many it shows) unless ``this_machine`` is False (a batch
      profile made here, on one GPU, for the ranks of a larger machine); N CPU processes otherwise;
    - ``auto``: every visible GPU when the seed trains on CUDA; 1 without a GPU or with ``training.device`` cpu.

    Any N works: ``training.batch_size`` is per rank, so every rank takes that many tiles a step and the effective
    batch is ``batch_size x N`` (:meth:`~rtscore.config.training.TrainingConfig.effective_batch_size`).

    Raises:
        DeviceError: N below 1, or more CUDA devices than this machine shows.
    """
    t = cfg.training
    want: Any = t.devices if devices is None else devices
    cuda = t.device != "cpu" and torch.cuda.is_available()
    if want == "auto":
        return torch.cuda.device_count() if cuda else 1
    n = int(want)
    if n < 1:
        raise DeviceError(f"training.devices must be at least 1 or auto; got {n}")
    if this_machine and cuda and n > torch.cuda.device_count():
        raise DeviceError(
            f"training.devices is {n} but this machine has {torch.cuda.device_count()} visible CUDA device(s); "
            "set training.devices to auto or at most that number"
        )
    return n


def rank_device(device: torch.device, ranks: Ranks) -> torch.device:
    """This rank's device: ``cuda:<local rank>`` for a CUDA seed, the CPU otherwise."""
    if device.type == "cuda" and ranks.distributed:
        return torch.device("cuda", ranks.local_rank)
    return device


def init_process_group(ranks: Ranks, device: torch.device, timeout_s: float = COLLECTIVE_TIMEOUT_S) -> None:
    """Join the seed's process group (NCCL on GPUs, gloo on the CPU); nothing with one rank. Collectives time out
    after ``timeout_s``, so a rank whose peer died fails instead of waiting for ever."""
    if not ranks.distributed or dist.is_initialized():
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))


def destroy_process_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def world_size() -> int:
    """Ranks of the current process group (1 outside one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def sum_across(value: float | int, device: torch.device) -> float:
    """``value`` summed over the ranks (itself with one rank), in float64."""
    if world_size() == 1:
        return float(value)
    return float(all_reduce(torch.tensor([float(value)], dtype=torch.float64, device=device)).item())


def gather(obj: T) -> list[T]:
    """Every rank's ``obj``, in rank order (``[obj]`` with one rank)."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


class CrossRankBatchNorm(nn.modules.batchnorm._BatchNorm):
    """Batch norm whose training statistics are those of the global batch across the ranks of the process group,
    for the CPU (gloo), where ``torch.nn.SyncBatchNorm`` is not available.

    Two differentiable all-reduces (the sum and count, then the sum of squared deviations: the two-pass variance,
    as accurate as the one-device kernel) give every rank the global mean and biased variance; their backward
    sums the gradients of every rank, so DDP's average is the one-device gradient. Running statistics are updated
    as ``nn.BatchNorm2d`` does (unbiased variance), identically on every rank. With one rank, in eval mode or
    outside a process group it is ``nn.BatchNorm2d``.
    """

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: Tensor) -> Tensor:
        if not (self.training and world_size() > 1):
            return super().forward(input)
        dims = [0, *range(2, input.dim())]
        shape = [1, -1] + [1] * (input.dim() - 2)
        x = input.float()
        local_n = x.new_tensor([x.numel() / x.shape[1]])
        total = all_reduce(torch.cat([x.sum(dims), local_n]))
        n = total[-1].detach()
        mean = total[:-1] / n
        centred = x - mean.view(shape)
        var = all_reduce((centred * centred).sum(dims)) / n
        out = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)  # type: ignore[union-attr]
                m = (
                    1.0 / float(self.num_batches_tracked)  # type: ignore[arg-type]
                    if self.momentum is None
                    else self.momentum
                )
                unbiased = var.detach() * (n / (n - 1).clamp_min(1))
                self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
                self.running_var.mul_(1 - m).add_(unbiased, alpha=m)
        return out.to(input.dtype)


def convert_batchnorm(module: nn.Module, device: torch.device) -> nn.Module:
    """Every batch norm of ``module`` made global-batch: torch's ``SyncBatchNorm`` on CUDA, :class:`CrossRankBatchNorm`
    on the CPU; weights, buffers and train/eval mode carried over."""
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(module)
    return _to_cross_rank(module)


def _to_cross_rank(module: nn.Module) -> nn.Module:
    out = module
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(module, CrossRankBatchNorm):
        out = CrossRankBatchNorm(module.num_features, module.eps, module.momentum, module.affine)
        out.track_running_stats = module.track_running_stats
        if module.affine:
            with torch.no_grad():
                out.weight = module.weight
                out.bias = module.bias
        out.running_mean = module.running_mean
        out.running_var = module.running_var
        out.num_batches_tracked = module.num_batches_tracked
        out.train(module.training)
    for name, child in module.named_children():
        out.add_module(name, _to_cross_rank(child))
    return out


def skip_unused(model: nn.Module, names: list[str]) -> None:
    """Every DDP wrap of ``model`` leaves out the parameters ``names``, which no training step reaches
    (:func:`rtscore.models.factory.unused_parameters`): DDP would wait for their gradients at the next step."""
    from torch.nn.parallel import DistributedDataParallel

    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, names)


def data_parallel(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` in torch's DistributedDataParallel over the seed's process group (its trainable parameters now:
    wrap again when the encoder is frozen or unfrozen). Buffers are not broadcast: global-batch batch norm keeps
    them identical on every rank."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=False)
