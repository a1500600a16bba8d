"""One device decision for every model: the device it sits on and the dtype it computes in.

A trained model (the actor, the extractor) names ``device`` and ``dtype`` in its settings,
``auto`` by default; :func:`resolve_placement` turns them into one :class:`Placement` that the
model, its LoRA adapters, its optimiser state and every generation backend built around it
follow. ``auto`` is CUDA when torch sees one (bfloat16 there) and the CPU otherwise (float32).
Asking for CUDA where torch sees none is a :class:`~comprl_gym.core.ConfigurationError` that
names the setting, raised when the trainer starts, not at the first rollout.

What stays float32 whatever ``dtype`` says (:func:`placement_errors` checks it):

* parameters that are trained (the LoRA adapters, or every weight in full fine-tuning): they
  are the optimiser's master weights. A bfloat16 weight has 8 bits of mantissa, so an AdamW
  step of ``lr`` 1e-6 on a weight of magnitude 1e-2 (relative 1e-4, under bfloat16's 2^-8)
  would round to no change at all. ``dtype`` is then the compute dtype (autocast).
* floating buffers that Hugging Face keeps in float32 on purpose (rotary frequencies).

Frozen weights (the base model under LoRA) are stored in ``dtype``.

Example:
    >>> placement = resolve_placement("cpu", "auto", setting="actor")
    >>> str(placement.device), str(placement.dtype)
    ('cpu', 'torch.float32')
    >>> resolve_placement("gpu", setting="actor")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    comprl_gym.core.ConfigurationError: actor.device must be auto, cpu, cuda or cuda:N, got 'gpu'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from comprl_gym.core import ConfigurationError, require

#: The dtypes a model may be stored and computed in (float16 would need loss scaling).
DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class Placement:
    """Where a model lives: a ``torch.device`` (``cuda:N`` with its index, never bare
    ``cuda``, so that equal devices compare equal) and the ``torch.dtype`` it computes in."""

    device: Any
    dtype: Any

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def resolve_device(device: Any = "auto", setting: str = "model") -> Any:
    """``auto`` / ``cpu`` / ``cuda`` / ``cuda:N`` (or a ``torch.device``) -> a ``torch.device``
    with an explicit index on CUDA; a ConfigurationError naming ``{setting}.device`` when the
    text is not one of those or CUDA is asked for where torch sees none."""
    torch = require("torch", "placing a model on a device", "llm")
    text = str(device).strip().lower()
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    if not re.fullmatch(r"cpu|cuda(:\d+)?", text):
        raise ConfigurationError(
            f"{setting}.device must be auto, cpu, cuda or cuda:N, got {str(device)!r}"
        )
    if text == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        raise ConfigurationError(
            f"{setting}.device is {str(device)!r} but torch {torch.__version__} ({build}) sees no "
            f"CUDA device: set {setting}.device to auto or cpu, or install the GPU wheels "
            "(bash scripts/install.sh --gpu, docs/gpu.md) on a machine with a GPU"
        )
    index = int(text.split(":")[1]) if ":" in text else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise ConfigurationError(
            f"{setting}.device is {str(device)!r} but torch sees {torch.cuda.device_count()} "
            "CUDA device(s)"
        )
    return torch.device("cuda", index)


def resolve_dtype(dtype: str, device: Any, setting: str = "model") -> Any:
    """``auto`` (bfloat16 on a CUDA device that supports it, else float32), ``float32`` or
    ``bfloat16`` -> a ``torch.dtype``."""
    torch = require("torch", "placing a model on a device", "llm")
    name = str(dtype).strip().lower().removeprefix("torch.")
    if name == "auto":
        on_cuda = getattr(device, "type", str(device)).startswith("cuda")
        name = "bfloat16" if on_cuda and torch.cuda.is_bf16_supported() else "float32"
    if name not in DTYPES:
        raise ConfigurationError(
            f"{setting}.dtype must be auto or one of {list(DTYPES)}, got {str(dtype)!r}"
        )
    return getattr(torch, name)


def resolve_placement(
    device: Any = "auto", dtype: str = "auto", setting: str = "model"
) -> Placement:
    """THE device decision of one model (see the module docstring); ``setting`` names the
    config section in errors (``actor``, ``extractor``)."""
    resolved = resolve_device(device, setting)
    return Placement(resolved, resolve_dtype(dtype, resolved, setting))


def module_device(module: Any) -> Any:
    """The device of ``module``'s first parameter (the CPU for a module without any)."""
    torch = require("torch", "placing a model on a device", "llm")
    for param in module.parameters():
        return param.device
    return torch.device("cpu")


def placement_errors(module: Any, placement: Placement) -> list[str]:
    """Every parameter and buffer of ``module`` that breaks the device decision, as
    ``name: what is wrong`` (an empty list when all is well): each tensor on
    ``placement.device``; a trained (``requires_grad``) floating parameter in float32 (master
    weights); a frozen floating parameter in ``placement.dtype``; a floating buffer in
    ``placement.dtype`` or float32 (Hugging Face keeps rotary frequencies in float32)."""
    torch = require("torch", "placing a model on a device", "llm")
    errors = []
    tensors = [(name, p, "parameter") for name, p in module.named_parameters()]
    tensors += [(name, b, "buffer") for name, b in module.named_buffers()]
    for name, tensor, kind in tensors:
        if tensor.device != placement.device:
            errors.append(f"{name}: {kind} on {tensor.device}, not {placement.device}")
        if not tensor.is_floating_point():
            continue
        if kind == "buffer":
            allowed = {placement.dtype, torch.float32}
        elif tensor.requires_grad:
            allowed = {torch.float32}
        else:
            allowed = {placement.dtype}
        if tensor.dtype not in allowed:
            wanted = " or ".join(sorted(str(d) for d in allowed))
            errors.append(f"{name}: {kind} in {tensor.dtype}, not {wanted}")
    return errors
