"""Which implementation each kernel has under the dispatch rules, for the table's meta (attention, the label
read-out and the norms: C, PyTorch reference and why, Triton, or transformers' own modules).

Derived, not recorded: it can name a kernel that did not run. The kernel dispatcher's record replaces it, taken
in :meth:`Backend.recording <logitjudge.judge.backends.base.Backend.recording>`."""

from __future__ import annotations


def derived_kernels(backend) -> dict:
    import torch
    from logitjudge_kernels import HAS_TRITON
    from logitjudge_kernels.cpu_attention import c_attention_refusal
    from logitjudge_kernels.cpu_norm import cpu_kernels_status
    from logitjudge_kernels.cpu_readout import MIN_ROWS, c_readout_refusal

    from .features import attention_shape, text_config

    cpu = backend.device.type == "cpu"
    _, head_dim = attention_shape(backend.model)
    dtype = next(backend.model.parameters()).dtype

    def c_or_ref(reason, ref="PyTorch reference"):
        return "C" if reason is None else f"{ref} ({reason})"

    if backend.name == "copy":
        attention = "transformers' attention (copied prefix cache)"
    elif cpu:
        q = torch.empty(1, 1, 1, head_dim, dtype=dtype)
        attention = c_or_ref(c_attention_refusal(q, getattr(text_config(backend.model), "attn_logit_softcapping",
                                                            None)), "ATen flash attention")
    else:
        attention = "Triton" if HAS_TRITON else "PyTorch reference (no Triton)"
    head = backend.head
    if cpu:
        h = torch.empty(1, head.weight.shape[1])
        readout = c_or_ref(c_readout_refusal(h, head.weight, head.softcap))
        if readout == "C":
            readout = f"C (batches of {MIN_ROWS}+ read rows; fewer: PyTorch reference)"
    else:
        readout = "Triton" if HAS_TRITON else "PyTorch reference (no Triton)"
    if backend.name != "native":
        norms = "transformers' modules"
    else:
        norms = c_or_ref(cpu_kernels_status() if cpu else "the C kernels are CPU only")
    return {"attention": attention, "readout": readout, "norms": norms}
