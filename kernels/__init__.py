"""logitjudge kernels: shared-prefix attention and the fused label read-out.

Installed as ``logitjudge_kernels`` (the folder is ``kernels/``). Each kernel has a PyTorch reference
(``*_ref``), a Triton implementation (``*_triton``, CUDA or ``TRITON_INTERPRET=1``) and a dispatcher
taking ``backend="auto" | "ref" | "triton"`` (attention also ``"cpu"``: the C kernel of ``cpu_attention`` in
fp32, else ATen's fused CPU flash attention).
``cpu_norm`` / ``cpu_attention`` / ``cpu_readout``: fused RMSNorm / residual / RoPE row kernels, shared-prefix
attention and the full-vocabulary log-sum-exp in C for CPU, computing in fp32 (built with the system compiler
at first use, ``_cbuild``; shared tiles in ``cpu_tiles.h``), each with its PyTorch reference; without a
compiler the references (attention: ATen's flash path) run.
"""

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
