"""BatchMLADecodeWrapper: plan a batch once, run the decode of every layer from its schedule.

A wrapper holds one schedule: the device image of a plan (uint8 tensor), written by ``plan`` from
host tensors (the host planner) or from tensors on the wrapper's GPU (the GPU planner, no
synchronisation), and read by ``run``, which neither allocates (unless asked for outputs) nor
synchronises. With ``use_cuda_graph=True`` the schedule is sized for the limits once, so a
``run`` captured in a CUDA graph replays the batch planned before each replay: one wrapper per
capture size.
"""

import weakref
from dataclasses import dataclass

import torch

from dcpmla._scalars import argument_error, index, real
from dcpmla._torch_library import call, ops

_LOG2E = 1.4426950408889634
_CACHE_DTYPES = (torch.float32, torch.bfloat16, torch.float8_e4m3fn)
# Schedule::status faults, in the library's order (dcpmla/schedule.h ScheduleFault).
_FAULTS = (
    "none",
    "first_start_not_zero",
    "query_not_increasing",
    "length_below_query",
    "rows_over_capacity",
    "blocks_over_capacity",
    "work_over_capacity",
    "merges_over_capacity",
    "partials_over_capacity",
)


@dataclass(frozen=True)
class ScheduleStatus:
    """What the GPU planner found wrong in the batch it planned last (fault "none": nothing).
    A faulted schedule's decode writes NaN into every output row."""

    fault: str
    request: int  # the first request that breaks the rule; -1 for batch-wide rules
    message: str

    @property
    def ok(self):
        return self.fault == "none"


def _device_index(device):
    return -1 if device.type == "cpu" else device.index


def _require_tensor(value, argument):
    if not isinstance(value, torch.Tensor):
        raise argument_error(
            TypeError, argument, "dtype mismatch", "a torch.Tensor", type(value).__name__
        )


def _masks(mask):
    """mask as the list plan_host_ takes: [] (causal), one name, or one name a request."""
    if mask is None:
        return []
    if isinstance(mask, str):
        return [mask]
    if isinstance(mask, (list, tuple)) and all(isinstance(m, str) for m in mask):
        return list(mask)
    raise argument_error(
        TypeError,
        "mask",
        "dtype mismatch",
        'None, "causal", "full" or a list of them, one a request',
        type(mask).__name__,
    )


def _positive(value, argument):
    value = index(value, argument)
    if value < 1:
        raise argument_error(ValueError, argument, "invalid argument", ">= 1", value)
    return value


class BatchMLADecodeWrapper:
    """One rank's MLA decode of planned batches (see the module doc).

    workspace: uint8 tensor on the device the decode runs on (CPU or a CUDA device): the split-KV
    partials (``workspace_bytes`` tells how many bytes the limits need). num_heads: the query heads
    the decode sees; block_size and num_blocks: the paged cache's [num_blocks, block_size, 576];
    kv_cache_dtype: torch.float32, torch.bfloat16 or torch.float8_e4m3fn. Under DCP the cache
    holds this rank's shard: position p on rank (p // dcp_interleave) % dcp_world_size.

    Limits (max_num_reqs, max_num_tokens, max_blocks_per_req: the block table's columns) size the
    schedule once; they are required with use_cuda_graph and for planning on the GPU. Without
    them each host plan sizes the schedule to its batch (growing the tensor when needed); on a GPU
    pass them anyway: a schedule of another size is set up again, pinned staging memory included.
    """

    def __init__(
        self,
        workspace,
        num_heads,
        block_size,
        kv_cache_dtype,
        dcp_world_size=1,
        dcp_rank=0,
        dcp_interleave=1,
        use_cuda_graph=False,
        *,
        num_blocks,
        max_num_reqs=None,
        max_num_tokens=None,
        max_blocks_per_req=None,
    ):
        if not isinstance(workspace, torch.Tensor) or workspace.dtype != torch.uint8:
            actual = workspace.dtype if isinstance(workspace, torch.Tensor) else type(workspace)
            raise argument_error(
                TypeError, "workspace", "dtype mismatch", "a torch.uint8 tensor", actual
            )
        if kv_cache_dtype not in _CACHE_DTYPES:
            raise argument_error(
                TypeError,
                "kv_cache_dtype",
                "dtype mismatch",
                "torch.float32, torch.bfloat16 or torch.float8_e4m3fn",
                kv_cache_dtype,
            )
        self._workspace = workspace
        self._device = workspace.device
        self._kv_cache_dtype = kv_cache_dtype
        self._use_cuda_graph = bool(use_cuda_graph)
        self._config = [
            _positive(num_heads, "num_heads"),
            _positive(block_size, "block_size"),
            _positive(num_blocks, "num_blocks"),
            index(dcp_world_size, "dcp_world_size"),
            index(dcp_rank, "dcp_rank"),
            index(dcp_interleave, "dcp_interleave"),
        ]
        limits = {
            "max_num_reqs": max_num_reqs,
            "max_num_tokens": max_num_tokens,
            "max_blocks_per_req": max_blocks_per_req,
        }
        missing = [name for name, value in limits.items() if value is None]
        if missing and (self._use_cuda_graph or len(missing) < 3):
            why = "with use_cuda_graph=True" if self._use_cuda_graph else "with the other limits"
            raise argument_error(ValueError, missing[0], "invalid argument", f"a limit {why}", None)
        self._schedule = None
        self._release = None
        self._softmax_scale = None
        self._limits = None
        if not missing:
            self._limits = [_positive(v, name) for name, v in limits.items()]
            schedule_bytes, workspace_bytes = call(
                ops.schedule_sizes, _device_index(self._device), self._config, self._limits
            )
            self._require_workspace(workspace_bytes)
            self._set_schedule(torch.empty(schedule_bytes, dtype=torch.uint8, device=self._device))

    @property
    def device(self):
        return self._device

    @property
    def schedule(self):
        """The schedule tensor (uint8; None before the first plan without limits)."""
        return self._schedule

    def _require_workspace(self, need):
        have = self._workspace.numel()
        if have < need:
            raise argument_error(
                ValueError,
                "workspace",
                "shape mismatch",
                f">= {need} bytes (split-KV partials of the schedule's capacity)",
                f"{have} bytes",
            )

    def _set_schedule(self, schedule):
        if self._release is not None:
            self._release()
        self._schedule = schedule
        # The extension keeps the schedule's host state by address: forget it with the tensor.
        self._release = weakref.finalize(self, ops.schedule_release_, schedule)

    def plan(
        self, query_start_loc, seq_lens, num_tokens=None, mask=None, *, softmax_scale, planner=None
    ):
        """Plans the batch for the runs that follow.

        query_start_loc [B + 1] and seq_lens [B] (global lengths including this step's tokens):
        int32/int64 CPU tensors for the host planner, or int32 tensors on the wrapper's GPU for the
        GPU planner (causal masks; faults are read with ``status()``). num_tokens: the decode's
        query rows, padding included (None: query_start_loc[B] on the host; the limit on the GPU).
        mask: None (causal), "causal" / "full", or one per request (host planner only).
        planner: "host" or "device" to choose (the CPU runs the GPU planner's algorithm too);
        None: by where query_start_loc lives.
        """
        self._softmax_scale = None  # unplanned until the schedule holds this batch
        _require_tensor(query_start_loc, "query_start_loc")
        _require_tensor(seq_lens, "seq_lens")
        scale = real(softmax_scale, "softmax_scale")
        if not 0.0 < scale < float("inf"):
            raise argument_error(
                ValueError, "softmax_scale", "invalid argument", "finite and > 0", scale
            )
        if num_tokens is not None:
            num_tokens = index(num_tokens, "num_tokens")
            if num_tokens < 0:
                raise argument_error(
                    ValueError, "num_tokens", "invalid argument", ">= 0 (or None)", num_tokens
                )
        num_tokens = -1 if num_tokens is None else num_tokens
        masks = _masks(mask)
        if planner is None:
            planner = "host" if query_start_loc.device.type == "cpu" else "device"
        if planner == "device":
            if any(m != "causal" for m in masks):
                raise argument_error(
                    ValueError, "mask", "unsupported", "causal masks on the GPU planner", mask
                )
            if self._limits is None:
                raise argument_error(
                    ValueError,
                    "max_blocks_per_req",
                    "invalid argument",
                    "limits at construction for planning on the device",
                    None,
                )
            call(
                ops.plan_device_,
                self._schedule,
                query_start_loc,
                seq_lens,
                num_tokens,
                self._config,
                self._limits,
            )
            self._softmax_scale = scale
            return
        if planner != "host":
            raise argument_error(
                ValueError, "planner", "invalid argument", "host or device", planner
            )
        limits = self._limits or [-1, -1, -1]
        if self._schedule is None:
            self._set_schedule(torch.empty(0, dtype=torch.uint8, device=self._device))
        args = (query_start_loc, seq_lens, num_tokens, masks, self._config, limits)
        schedule_bytes, workspace_bytes = call(ops.plan_host_, self._schedule, *args)
        if schedule_bytes > self._schedule.numel():  # fitting the batch: grow, plan again
            self._set_schedule(torch.empty(schedule_bytes, dtype=torch.uint8, device=self._device))
            call(ops.plan_host_, self._schedule, *args)
        self._require_workspace(workspace_bytes)
        self._softmax_scale = scale

    def run(self, q, kv_cache, block_table, out=None, lse=None, k_scale=1.0, lse_base_e=True):
        """The planned batch's decode on torch's current stream; returns (out, lse).

        q [num_tokens, num_heads, 576] float32 or bfloat16, kv_cache [num_blocks, block_size, 576]
        of kv_cache_dtype (fp8: storing x / k_scale), block_table [>= B, >= max_blocks] int32;
        out [num_tokens, num_heads, 512] float32 or q's dtype and lse [num_tokens, num_heads]
        float32 (natural log, or base 2 with lse_base_e=False) are allocated when None. Rows a
        rank sees nothing of and padding rows: O = 0, LSE = -inf.
        """
        if self._softmax_scale is None:
            raise argument_error(
                ValueError, "schedule", "invalid argument", "a batch planned by plan()", "none"
            )
        _require_tensor(q, "q")
        if q.dim() != 3:
            raise argument_error(
                ValueError,
                "q",
                "shape mismatch",
                "shape [num_tokens, num_heads, 576]",
                tuple(q.shape),
            )
        _require_tensor(kv_cache, "kv_cache")
        k_scale = real(k_scale, "k_scale")
        if kv_cache.dtype != self._kv_cache_dtype:
            raise argument_error(
                TypeError,
                "kv_cache",
                "dtype mismatch",
                f"the wrapper's kv_cache_dtype {self._kv_cache_dtype}",
                kv_cache.dtype,
            )
        if out is None:
            out = q.new_empty((q.shape[0], q.shape[1], 512))
        if lse is None:
            lse = q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)
        call(
            ops.mla_decode_,
            q,
            kv_cache,
            block_table,
            self._schedule,
            self._workspace,
            out,
            lse,
            self._softmax_scale,
            1.0,
            k_scale,
        )
        if not lse_base_e:
            lse.mul_(_LOG2E)
        return out, lse

    def status(self):
        """The GPU planner's verdict on the batch planned last (synchronises the stream)."""
        if self._schedule is None or self._softmax_scale is None:
            return ScheduleStatus("none", -1, "")
        fault, request, message = call(ops.schedule_status, self._schedule)
        return ScheduleStatus(
            _FAULTS[fault] if 0 <= fault < len(_FAULTS) else str(fault), request, message
        )

    def workspace_bytes(self):
        """Bytes of workspace the limits need (None without limits)."""
        if self._limits is None:
            return None
        return call(ops.schedule_sizes, _device_index(self._device), self._config, self._limits)[1]
