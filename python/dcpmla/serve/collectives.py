"""The harness's collectives over a torch.distributed group, wherever its tensors live: NCCL
moves CUDA tensors itself; gloo takes CPU tensors, so ranks simulated on one GPU (more ranks than
GPUs: one process each, a gloo group) stage their CUDA tensors through the host."""

import torch.distributed as dist

from dcpmla.distributed import dcp_combine, dcp_gather_heads


def staged_on_host(tensor, group):
    """Whether a collective of `tensor` over `group` goes through host memory."""
    return tensor.is_cuda and dist.get_backend(group) == "gloo"


def all_reduce_(tensor, group):
    """Sums tensor over the group in place."""
    if not staged_on_host(tensor, group):
        dist.all_reduce(tensor, group=group)
        return
    host = tensor.cpu()
    dist.all_reduce(host, group=group)
    tensor.copy_(host)


def broadcast_(tensor, src, group):
    if not staged_on_host(tensor, group):
        dist.broadcast(tensor, src=src, group=group)
        return
    host = tensor.cpu()
    dist.broadcast(host, src=src, group=group)
    tensor.copy_(host)


def gather_heads(q_local, group):
    """dcpmla.dcp_gather_heads on the tensor's device."""
    if not staged_on_host(q_local, group):
        return dcp_gather_heads(q_local, group)
    return dcp_gather_heads(q_local.cpu(), group).to(q_local.device)


def combine(out, lse, group, mode):
    """dcpmla.dcp_combine on the tensors' device."""
    if not staged_on_host(out, group):
        return dcp_combine(out, lse, group, mode)
    return dcp_combine(out.cpu(), lse.cpu(), group, mode).to(out.device)
