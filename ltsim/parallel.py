"""ParallelConfig: tensor, context, pipeline and data parallel degrees, ZeRO stage, recompute."""

from __future__ import annotations

from dataclasses import dataclass

from ltsim.errors import ConfigError

RECOMPUTE = ("none", "selective", "full")
CP_KINDS = ("ring", "ulysses")
STATE_DTYPES = ("fp32", "model")


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelConfig:
    """How the model and the data are split over devices (Megatron-LM's naming).

    A simulated *device* is one pipeline stage of one data-parallel replica: its tp * cp GPUs
    work in lockstep on the same ops and are represented once in the plan.
    """

    tp: int = 1
    cp: int = 1
    cp_kind: str = "ring"
    pp: int = 1
    dp: int = 1
    zero_stage: int = 1
    recompute: str = "selective"
    sequence_parallel: bool = True  # Megatron SP with TP > 1
    grad_dtype: str = "fp32"  # "fp32": Megatron's main gradients and their reduction in fp32 (its
    # default for bf16: accumulate_allreduce_grads_in_fp32); "model": in the model dtype
    optimizer_dtype: str = "fp32"  # "fp32": fp32 master weights and Adam moments (mixed precision);
    # "model": Adam on the model-dtype weights, moments in the model dtype (no master copy)
    overlap_grad_reduce: bool = True  # the DP gradient reduction starts with the backward that
    # makes the gradients (Megatron's --overlap-grad-reduce, DeepSpeed's overlap_comm); False:
    # after it (Megatron-Core's default; DeepSpeed's below ZeRO-3). docs/design-notes.md

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def num_sim_devices(self) -> int:
        """Devices the plan models explicitly: one per (dp replica, stage)."""
        return self.pp * self.dp

    def sim_device(self, *, dp_rank: int, stage: int) -> int:
        return dp_rank * self.pp + stage

    def stage_of(self, device: int) -> int:
        return device % self.pp

    def dp_rank_of(self, device: int) -> int:
        return device // self.pp

    def validate(self, num_devices: int | None = None) -> "ParallelConfig":
        """Check degrees; with ``num_devices``, check they multiply to the cluster size."""
        for key in ("tp", "cp", "pp", "dp"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"parallel.{key}", "a positive integer", value)
        if self.zero_stage not in (0, 1, 2, 3):
            raise ConfigError("parallel.zero_stage", "0, 1, 2 or 3", self.zero_stage)
        if self.recompute not in RECOMPUTE:
            raise ConfigError("parallel.recompute", f"one of {', '.join(RECOMPUTE)}", self.recompute)
        for key in ("grad_dtype", "optimizer_dtype"):
            if getattr(self, key) not in STATE_DTYPES:
                raise ConfigError(f"parallel.{key}", f"one of {', '.join(STATE_DTYPES)}",
                                  getattr(self, key), 'e.g. "fp32" (mixed precision, the default)')
        if self.cp_kind not in CP_KINDS:
            raise ConfigError("parallel.cp_kind", f"one of {', '.join(CP_KINDS)}", self.cp_kind)
        if num_devices is not None:
            model_parallel = self.model_parallel_size(num_devices)
            if self.world_size != num_devices:
                raise ConfigError(
                    "parallel.dp", f"{num_devices // model_parallel} so that tp*cp*pp*dp equals the "
                    f"{num_devices} devices", self.dp,
                    fix="omit parallel.dp to derive it, or change the cluster size")
        return self

    def model_parallel_size(self, num_devices: int) -> int:
        """tp * cp * pp, checked to divide ``num_devices`` (ConfigError otherwise)."""
        model_parallel = self.tp * self.cp * self.pp
        if num_devices % model_parallel:
            raise ConfigError(
                "parallel.tp * parallel.cp * parallel.pp", f"a divisor of the {num_devices} "
                "devices", model_parallel,
                "change parallel.tp, cp or pp, or hardware.num_nodes/gpus_per_node",
                context=f"tp={self.tp}, cp={self.cp}, pp={self.pp}")
        return model_parallel
