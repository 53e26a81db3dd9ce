"""logitjudge kernels: shared-prefix attention and the fused label read-out.

Installed as ``logitjudge_kernels`` (the folder is ``kernels/logitjudge_kernels/``; nothing at ``kernels/`` itself
can shadow Hugging Face's ``kernels`` package). Each kernel has a PyTorch reference
(``*_ref``), a Triton implementation (``*_triton``, CUDA or ``TRITON_INTERPRET=1``) and a dispatcher
taking ``backend="auto" | "ref" | "triton" | "cpu"``.
``cpu_norm`` / ``cpu_attention`` / ``cpu_readout``: fused RMSNorm / residual / RoPE row kernels, shared-prefix
attention and the full-vocabulary log-sum-exp in C for CPU, computing in fp32 (built with the system compiler
at first use, ``_cbuild``; register tiles of the target's vector width in ``cpu_tiles.h``), each with its
PyTorch reference. On CPU, ``auto`` is :mod:`.dispatch`: each kernel runs the implementation (C, ATen, torch)
that measured fastest on this machine for the shape's bucket, exact within its stated tolerance; the decision is
cached per machine; ``dispatch.recording()`` says what ran. Without a compiler the references run.
"""

from . import dispatch
from ._triton_util import HAS_TRITON, interpreter_active, triton_usable
from .prefix_attention import (
    attention_ref,
    merge_attention_states,
    shared_prefix_attention,
    shared_prefix_attention_aten,
    shared_prefix_attention_cpu,
    shared_prefix_attention_ref,
    shared_prefix_attention_triton,
)
from .readout import (
    LabelReadout,
    label_logprobs,
    label_logprobs_plain,
    label_logprobs_ref,
    label_logprobs_triton,
)

__all__ = [
    "HAS_TRITON",
    "LabelReadout",
    "attention_ref",
    "dispatch",
    "interpreter_active",
    "label_logprobs",
    "label_logprobs_plain",
    "label_logprobs_ref",
    "label_logprobs_triton",
    "merge_attention_states",
    "shared_prefix_attention",
    "shared_prefix_attention_aten",
    "shared_prefix_attention_cpu",
    "shared_prefix_attention_ref",
    "shared_prefix_attention_triton",
    "triton_usable",
]
