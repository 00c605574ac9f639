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


def dense(t):
    """True when ``t``'s elements fill one block of memory with no gaps or
    overlaps, in any order (contiguous, channels_last, a transpose)."""
    if t.numel() <= 1:
        return True
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride()) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def check_host(t, what, any_order=False):
    """Raises unless ``t`` is a CPU tensor that is contiguous (or, with
    ``any_order``, dense in any order of its dimensions)."""
    if not isinstance(t, torch.Tensor):
        raise InvalidArgumentError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise NotSupportedError(f"{what}: a {t.device.type} tensor; this call takes CPU tensors")
    if not (t.is_contiguous() or (any_order and dense(t))):
        raise InvalidArgumentError(f"{what}: not contiguous (call .contiguous() first)")


def view(name, t, what=None, any_order=False):
    """The view of a CPU tensor: its HAL dtype and shape, or, for a dtype
    the HAL lacks (bool, int8, int16, complex), its bytes as u8 of shape
    [*shape, element size], so that a tensor of another shape or element
    size does not match it. ``any_order``: a dense tensor in any memory
    order is taken as its memory (snapshots restore into the same tensor)."""
    check_host(t, what or f"tensor '{name}'", any_order)
    shape = list(t.shape) if t.is_contiguous() else [t.numel()]
    if t.dtype in HAL_DTYPE:
        return (name, HAL_DTYPE[t.dtype], shape, t.data_ptr())
    return (name, _sigma.DTYPE_U8, shape + [t.element_size()], t.data_ptr())


def buffer(t, what):
    """(address, count, dtype) of a dense CPU f32/f16/bf16 tensor."""
    check_host(t, what, any_order=True)
    if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise InvalidArgumentError(f"{what}: dtype {t.dtype}; the guardrails take float32, float16 or bfloat16")
    return (t.data_ptr(), t.numel(), HAL_DTYPE[t.dtype])


def optimizer_params(optimizer):
    return [p for group in optimizer.param_groups for p in group["params"]]


# Optimizers whose state, made by one step with zero gradients at learning
# rate and weight decay 0 (step counters then put back to 0), is exactly the
# state their first real step starts from.
_MATERIALIZABLE = ("Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adadelta")


def materialize(optimizer):
    """Creates the lazily made state (Adam's moments, SGD's momentum) of the
    parameters that have none yet, as it is before their first step, so that
    it can be registered or restored before training starts. Parameters that
    have state are not touched. Other optimizers must step once first."""
    params = optimizer_params(optimizer)
    fresh = [p for p in params if not optimizer.state.get(p)]
    if not fresh:
        return
    name = type(optimizer).__name__
    if name not in _MATERIALIZABLE:
        raise NotSupportedError(
            f"{name}: its state appears at its first step and cannot be made before it here; "
            "register or checkpoint it after one step"
        )
    fresh_ids = {id(p) for p in fresh}
    grads = [p.grad for p in params]
    saved = [(group.get("lr"), group.get("weight_decay")) for group in optimizer.param_groups]
    try:
        for p in params:
            p.grad = torch.zeros_like(p) if id(p) in fresh_ids else None  # None: the optimizer skips it
        for group in optimizer.param_groups:
            group["lr"] = 0.0
            if "weight_decay" in group:
                group["weight_decay"] = 0.0
        optimizer.step()
    finally:
        for p, g in zip(params, grads):
            p.grad = g
        for group, (lr, wd) in zip(optimizer.param_groups, saved):
            group["lr"] = lr
            if wd is not None:
                group["weight_decay"] = wd
    for p in fresh:
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
            elif value is not None:  # plain SGD's momentum_buffer is None
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
