"""Torch tensors and state dicts as the (name, dtype, shape, address) views
the native half takes. Only here is a pointer taken, after the tensor was
checked to be a contiguous CPU tensor that outlives the call."""

import json

import torch

from . import _sigma
from .errors import InvalidArgumentError, NotSupportedError

# Torch dtypes the HAL has; any other dtype is carried as its raw bytes (U8).
HAL_DTYPE = {
    torch.float32: _sigma.DTYPE_F32,
    torch.float16: _sigma.DTYPE_F16,
    torch.bfloat16: _sigma.DTYPE_BF16,
    torch.float64: _sigma.DTYPE_F64,
    torch.int32: _sigma.DTYPE_I32,
    torch.int64: _sigma.DTYPE_I64,
    torch.uint8: _sigma.DTYPE_U8,
}


def check_host(t, what):
    """Raises unless ``t`` is a contiguous CPU tensor."""
    if not isinstance(t, torch.Tensor):
        raise InvalidArgumentError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise NotSupportedError(f"{what}: a {t.device.type} tensor; this call takes CPU tensors")
    if not t.is_contiguous():
        raise InvalidArgumentError(f"{what}: not contiguous (call .contiguous() first)")


def view(name, t, what=None):
    """The view of a contiguous CPU tensor: its HAL dtype and shape, or its
    raw bytes for a dtype the HAL lacks (bool, int8, complex, ...)."""
    check_host(t, what or f"tensor '{name}'")
    if t.dtype in HAL_DTYPE:
        return (name, HAL_DTYPE[t.dtype], list(t.shape), t.data_ptr())
    return (name, _sigma.DTYPE_U8, [t.numel() * t.element_size()], t.data_ptr())


def buffer(t, what):
    """(address, count, dtype) of a contiguous CPU f32/f16/bf16 tensor."""
    check_host(t, what)
    if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise InvalidArgumentError(f"{what}: dtype {t.dtype}; the guardrails take float32, float16 or bfloat16")
    return (t.data_ptr(), t.numel(), HAL_DTYPE[t.dtype])


def optimizer_params(optimizer):
    return [p for group in optimizer.param_groups for p in group["params"]]


def materialize(optimizer):
    """Creates an optimizer's lazily made state (Adam's moments, SGD's
    momentum) as it is before its first step, so that it can be registered
    or restored before training starts: one step with zero gradients at
    learning rate 0 (which changes no parameter), then every step counter
    back to 0. For SGD with dampening the first real step then treats the
    zero momentum buffer as existing (PyTorch starts it from the gradient)."""
    params = optimizer_params(optimizer)
    if all(optimizer.state.get(p) for p in params):
        return
    grads = [p.grad for p in params]
    lrs = [group["lr"] for group in optimizer.param_groups]
    try:
        for p in params:
            p.grad = torch.zeros_like(p)
        for group in optimizer.param_groups:
            group["lr"] = 0.0
        optimizer.step()
    finally:
        for p, g in zip(params, grads):
            p.grad = g
        for group, lr in zip(optimizer.param_groups, lrs):
            group["lr"] = lr
    for p in params:
        state = optimizer.state.get(p, {})
        for key, value in state.items():
            if key == "step":
                if isinstance(value, torch.Tensor):
                    value.zero_()
                else:
                    state[key] = 0


def optimizer_tensors(optimizer):
    """(name, tensor) of every state tensor, named by the parameter's index
    as in ``optimizer.state_dict()``; plus the non-tensor values."""
    tensors, scalars = [], {}
    for index, p in enumerate(optimizer_params(optimizer)):
        for key, value in sorted(optimizer.state.get(p, {}).items()):
            if isinstance(value, torch.Tensor):
                tensors.append((f"optim/{index}/{key}", value))
            else:
                scalars.setdefault(str(index), {})[key] = value
    return tensors, scalars


def state_dict_tensors(prefix, state):
    """(name, tensor) of a state dict's tensors, nested dicts flattened."""
    out = []
    for key, value in state.items():
        name = f"{prefix}/{key}"
        if isinstance(value, torch.Tensor):
            out.append((name, value))
        elif isinstance(value, dict):
            out.extend(state_dict_tensors(name, value))
    return out


def param_groups_json(optimizer):
    return json.dumps([{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups])


def restore_param_groups(optimizer, text):
    saved = json.loads(text)
    if len(saved) != len(optimizer.param_groups):
        raise InvalidArgumentError(
            f"checkpoint has {len(saved)} optimizer param groups, the optimizer {len(optimizer.param_groups)}"
        )
    for group, values in zip(optimizer.param_groups, saved):
        for key, value in values.items():
            if isinstance(group.get(key), tuple):
                value = tuple(value)
            group[key] = value
