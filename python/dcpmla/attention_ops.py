"""The torch ops on torch tensors, written in place on torch's current stream (CPU tensors on the
CPU backend, CUDA tensors on the CUDA backend), with the library's errors raised as
``dcpmla.cpu`` raises them. ``torch.ops.dcpmla.*`` are the same ops without that translation (for
compiled graphs); their fake implementations let ``torch.compile(fullgraph=True)`` trace them.

Shapes (N query rows incl. padding, H heads, B requests):

- ``mla_decode_(q, kv_cache, block_table, schedule, workspace, out, lse, softmax_scale,
  q_scale=1.0, k_scale=1.0)``: q [N, H, 576] float32 or bfloat16; kv_cache [num_blocks,
  block_size, 576] float32, bfloat16 or float8_e4m3fn (storing x / k_scale); block_table [B,
  max_blocks] int32; schedule and workspace uint8 (``BatchMLADecodeWrapper`` makes and plans
  them); out [N, H, 512] float32 or q's dtype; lse [N, H] float32, natural log.
- ``merge_states_(v, s, v_out, s_out, lse_base_e=True)``: v [S, N, H, D] float32 or bfloat16,
  s [S, N, H] float32 -> v_out [N, H, D], s_out [N, H] (log-sum-exp merge; base 2 when
  lse_base_e is False).
- ``write_kv_(latent, slot_mapping, kv_cache, k_scale=1.0)``: latent [n, 576] float32 or
  bfloat16 at slots slot_mapping [n] int64 (-1: skipped) of kv_cache.
"""

from dcpmla._scalars import real
from dcpmla._torch_library import call, ops


def mla_decode_(
    q, kv_cache, block_table, schedule, workspace, out, lse, softmax_scale, q_scale=1.0, k_scale=1.0
):
    """One rank's MLA decode of the plan in `schedule` into out and lse (see the module doc)."""
    call(
        ops.mla_decode_,
        q,
        kv_cache,
        block_table,
        schedule,
        workspace,
        out,
        lse,
        real(softmax_scale, "softmax_scale"),
        real(q_scale, "q_scale"),
        real(k_scale, "k_scale"),
    )


def merge_states_(v, s, v_out, s_out, lse_base_e=True):
    """v_out, s_out <- the log-sum-exp merge of the S partial states (v, s)."""
    call(ops.merge_states_, v, s, v_out, s_out, bool(lse_base_e))


def write_kv_(latent, slot_mapping, kv_cache, k_scale=1.0):
    """kv_cache slots <- latent rows (fp8 caches store x / k_scale); slot -1 skips a row."""
    call(ops.write_kv_, latent, slot_mapping, kv_cache, real(k_scale, "k_scale"))
