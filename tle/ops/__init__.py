"""tle.ops: the operator library, each operator written once and run on "torch", "triton" or "tilelang".

    y = tle.ops.rms_norm(x, (4096,), weight, eps=1e-6, backend="tilelang")   # torch's F.rms_norm arguments
    norm = tle.ops.RMSNorm(4096, backend="triton")

Every operator is a torch.library custom op (tle::<name>) with a backward; docs/ops.md lists them.
Operators live in their own modules under kernels/ (installed as tle.kernels); this package re-exports
them, one line per operator module (its OPERATOR record, or a tuple of them, imported as _op_<module>),
and OPERATORS lists those records for the tests and tle-bench."""
from tle.oplib.operator import Operator as _Operator

from tle.kernels.activations import OPERATOR as _op_activations, GELU, SiLU, gelu, silu  # noqa: E402,F401
from tle.kernels.bce_with_logits import OPERATOR as _op_bce_with_logits, BCEWithLogitsLoss, binary_cross_entropy_with_logits  # noqa: E402,F401,E501
from tle.kernels.cross_entropy import OPERATOR as _op_cross_entropy, CrossEntropyLoss, cross_entropy  # noqa: E402,F401
from tle.kernels.dropout_add import OPERATOR as _op_dropout_add, DropoutAdd, dropout_add  # noqa: E402,F401
from tle.kernels.embedding_bag import OPERATOR as _op_embedding_bag, EmbeddingBag, embedding_bag  # noqa: E402,F401
from tle.kernels.flash_attention import OPERATOR as _op_flash_attention, flash_attention  # noqa: E402,F401
from tle.kernels.fused_linear_cross_entropy import OPERATOR as _op_fused_linear_cross_entropy, FusedLinearCrossEntropyLoss, fused_linear_cross_entropy  # noqa: E402,F401,E501
from tle.kernels.gated_delta_rule import OPERATOR as _op_gated_delta_rule, chunk_gated_delta_rule, fused_recurrent_gated_delta_rule  # noqa: E402,F401,E501
from tle.kernels.gated_activations import OPERATOR as _op_gated_activations, geglu, swiglu  # noqa: E402,F401
from tle.kernels.group_norm import OPERATOR as _op_group_norm, GroupNorm, group_norm  # noqa: E402,F401
from tle.kernels.jsd import OPERATOR as _op_jsd, JSD, jsd  # noqa: E402,F401
from tle.kernels.kl_div import OPERATOR as _op_kl_div, KLDivLoss, kl_div  # noqa: E402,F401
from tle.kernels.l2_norm import OPERATOR as _op_l2_norm, L2Norm, l2_norm  # noqa: E402,F401
from tle.kernels.linear_activation import OPERATOR as _op_linear_activation, linear_act, linear_swiglu  # noqa: E402,F401
from tle.kernels.layer_norm import OPERATOR as _op_layer_norm, LayerNorm, layer_norm  # noqa: E402,F401
from tle.kernels.rms_norm import OPERATOR as _op_rms_norm, RMSNorm, rms_norm  # noqa: E402,F401
from tle.kernels.rotary import OPERATOR as _op_rotary, apply_rotary_pos_emb  # noqa: E402,F401
from tle.kernels.sampling import OPERATOR as _op_sampling, sample, top_k_top_p_mask  # noqa: E402,F401
from tle.kernels.scaled_dot_product_attention import OPERATOR as _op_scaled_dot_product_attention, scaled_dot_product_attention  # noqa: E402,F401,E501
from tle.kernels.scale_bias_add import OPERATOR as _op_scale_bias_add, scale_bias_add  # noqa: E402,F401
from tle.kernels.silu_attention import OPERATOR as _op_silu_attention, silu_attention  # noqa: E402,F401
from tle.kernels.softmax import OPERATOR as _op_softmax, Softmax, softmax  # noqa: E402,F401
from tle.kernels.sparse_mla_attention import OPERATOR as _op_sparse_mla_attention, sparse_mla  # noqa: E402,F401

OPERATORS = {op.name: op for k, v in dict(globals()).items() if k.startswith("_op_")
             for op in (v if isinstance(v, tuple) else (v,)) if isinstance(op, _Operator)}
