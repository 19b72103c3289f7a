"""How the TileLang lowering carries out every load, store and atomic of the kernels and corpus cases: which
become bulk copies (T.copy, bounds-predicated, issued as TMA or cp.async where TileLang can), which stay
element-wise T.Parallel code, which run as scalars. The numeric tests cannot see these decisions (an
element-wise copy computes the same thing, slower); this test pins them, as `tle compare` prints them."""
import pytest

from kernel_cases import example_kernels, lower_example
from syntax_corpus import CASES
from tilelang_oracle import needs_tilelang

pytestmark = needs_tilelang

# (op, access kind, how the TileLang lowering carries it out), in program order
PLANS = {
    'activations.activation_bwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'activations.activation_fwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'bce_with_logits.bce_with_logits_bwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'bce_with_logits.bce_with_logits_fwd_kernel': [
        ('load', 'scalar', 'scalar expression'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'scalar', 'scalar statement'),
    ],
    'bce_with_logits.bce_with_logits_sum_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'scalar', 'scalar statement'),
    ],
    'dropout_add.dropout_add_fwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'dropout_add.dropout_bwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'embedding_bag.embedding_bag_bwd_atomic_kernel': [
        ('load', 'scalar', 'scalar expression'),
        ('load', 'scalar', 'scalar expression'),
        ('load', 'scalar', 'scalar expression'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'read at each use'),
        ('atomic', 'gather', 'T.atomic_add per element'),
    ],
    'embedding_bag.embedding_bag_bwd_sorted_kernel': [
        ('load', 'box', 'read at each use'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'gather', 'read at each use'),
        ('load', 'gather', 'T.Parallel into fragment'),
        ('load', 'gather', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'embedding_bag.embedding_bag_cast_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'embedding_bag.embedding_bag_fwd_kernel': [
        ('load', 'scalar', 'scalar expression'),
        ('load', 'scalar', 'scalar expression'),
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'scalar', 'scalar statement'),
    ],
    'l2_norm.l2_norm_fwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'l2_norm.l2_norm_bwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'gated_activations.gated_bwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'gated_activations.gated_fwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'layer_norm.layer_norm_fwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'layer_norm.layer_norm_bwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'matmul.matmul_kernel': [
        ('load', 'box', 'T.copy into shared'),
        ('load', 'box', 'T.copy into shared'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'matmul_smem.matmul_smem_kernel': [
        ('tle.gpu.alloc', 'buffer', 'T.alloc_shared a_smem'),
        ('tle.gpu.alloc', 'buffer', 'T.alloc_shared b_smem'),
        ('tle.gpu.alloc', 'buffer', 'T.alloc_shared c_smem'),
        ('tle.gpu.pipeline', 'loop', 'T.Pipelined(num_stages=2)'),
        ('tle.gpu.copy', 'box', 'T.copy into a_smem'),
        ('tle.gpu.copy', 'box', 'T.copy into b_smem'),
        ('tle.gpu.local_load', 'buffer', 'reads a_smem in place'),
        ('tle.gpu.local_load', 'buffer', 'reads b_smem in place'),
        ('tle.gpu.local_store', 'buffer', 'T.Parallel into the buffer'),
        ('tle.gpu.copy', 'box', 'T.copy from c_smem'),
    ],
    'raw_vector_add.add_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('tle.call', 'raw', 'thread-level code on shared buffers'),
        ('store', 'box', 'T.copy from shared'),
    ],
    'rms_norm.rms_norm_fwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'rms_norm.rms_norm_bwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'column_sum.column_sum_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'scale_bias_add.scale_bias_add_bwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'scale_bias_add.scale_bias_add_fwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'softmax.softmax_bwd_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'softmax.softmax_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'sparse_mla.sparse_mla_fwd_kernel': [
        ('load', 'box', 'T.Parallel into shared'),
        ('load', 'box', 'T.Parallel into shared'),
        ('load', 'box', 'T.Parallel into shared in stage 0 of T.Pipelined'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('store', 'box', 'T.Parallel'),
        ('store', 'box', 'T.Parallel'),
    ],
    'sparse_mla_smem.sparse_mla_fwd_smem_kernel': [
        ('tle.gpu.alloc', 'buffer', 'T.alloc_shared q_smem'),
        ('tle.gpu.alloc', 'buffer', 'T.alloc_shared tq_smem'),
        ('tle.gpu.alloc', 'buffer', 'T.alloc_shared kv_smem'),
        ('tle.gpu.alloc', 'buffer', 'T.alloc_shared tkv_smem'),
        ('tle.gpu.copy', 'box', 'T.Parallel into q_smem'),
        ('tle.gpu.copy', 'box', 'T.Parallel into tq_smem'),
        ('tle.gpu.pipeline', 'loop', 'T.Pipelined(num_stages=2)'),
        ('load', 'box', 'T.Parallel into shared in stage 0 of T.Pipelined'),
        ('tle.gpu.copy', 'gather', 'T.Parallel into kv_smem'),
        ('tle.gpu.copy', 'gather', 'T.Parallel into tkv_smem'),
        ('tle.gpu.local_load', 'buffer', 'reads kv_smem in place'),
        ('tle.gpu.local_load', 'buffer', 'reads tkv_smem in place'),
        ('tle.gpu.local_load', 'buffer', 'reads tq_smem in place'),
        ('tle.gpu.local_load', 'buffer', 'reads q_smem in place'),
        ('store', 'box', 'T.Parallel'),
        ('store', 'box', 'T.Parallel'),
    ],
    'vector_add.add_kernel': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'argmax_rows': [
        ('load', 'box', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('atomic', 'box', 'T.atomic_add per element'),
    ],
    'atomic_histogram': [
        ('load', 'box', 'T.copy into fragment'),
        ('atomic', 'general', 'T.atomic_add per element'),
    ],
    'atomic_scalar': [
        ('load', 'box', 'T.copy into fragment'),
        ('atomic', 'scalar', 'T.atomic_add on one thread'),
    ],
    'carried_loop': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'scalar', 'scalar statement'),
    ],
    'data_mask': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.Parallel'),
    ],
    'dot_transposed': [
        ('load', 'box', 'T.copy into shared'),
        ('load', 'box', 'T.copy into shared'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'dot_variants': [
        ('load', 'box', 'T.copy into shared'),
        ('load', 'box', 'T.copy into shared'),
        ('load', 'box', 'T.copy into shared'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'expression_forms': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'gather': [
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'integer_semantics': [
        ('load', 'box', 'T.Parallel into fragment'),
        ('load', 'box', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'loops_and_branches': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'mask_forms': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.Parallel'),
        ('store', 'box', 'T.Parallel'),
    ],
    'mask_bounds': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.Parallel'),
        ('load', 'box', 'T.Parallel into fragment'),
        ('store', 'box', 'T.Parallel'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'masked_prefix': [
        ('load', 'box', 'T.Parallel into fragment'),
        ('store', 'box', 'T.Parallel'),
    ],
    'math_and_casts': [
        ('load', 'box', 'T.Parallel into fragment'),
        ('load', 'box', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'offset_boxes': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'odd_2d_masked': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'reductions_2d': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('load', 'box', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'reshape_and_transpose': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'runtime_branch': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'scalar_and_atomic_extremes': [
        ('load', 'scalar', 'scalar expression'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'scalar', 'scalar statement'),
        ('atomic', 'scalar', 'T.atomic_max on one thread'),
        ('atomic', 'general', 'T.atomic_min per element'),
    ],
    'static_range_carried': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'tl_range_stages': [
        ('load', 'box', 'T.Parallel into fragment'),     # a plain read in T.Pipelined: see the norms' backward
        ('store', 'scalar', 'scalar statement'),
    ],
    'tle_load_async': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'transposed_input': [
        ('load', 'strided', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'masked_edges': [
        ('load', 'scalar', 'scalar expression'),
        ('load', 'scalar', 'scalar expression'),
        ('store', 'scalar', 'scalar statement'),
        ('load', 'box', 'T.Parallel into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.Parallel'),
    ],
    'folded_int_division': [
        ('store', 'scalar', 'scalar statement'),
        ('store', 'scalar', 'scalar statement'),
        ('store', 'scalar', 'scalar statement'),
        ('store', 'scalar', 'scalar statement'),
        ('store', 'scalar', 'scalar statement'),
        ('store', 'scalar', 'scalar statement'),
    ],
    'keep_dims_first_axis': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'scalar', 'scalar expression'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'scalar_atomics_masked': [
        ('atomic', 'scalar', 'T.atomic_add on one thread'),
        ('atomic', 'scalar', 'T.atomic_max on one thread'),
        ('atomic', 'scalar', 'T.atomic_add on one thread'),
    ],
    'index_values_scatter': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'read at each use'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'gather', 'T.Parallel'),
        ('atomic', 'general', 'T.atomic_add per element'),
    ],
    'gathers_masked_rows': [
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('store', 'box', 'T.copy from fragment'),
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'dot_operand_reuse': [
        ('load', 'strided', 'T.Parallel into shared'),
        ('load', 'box', 'T.copy into shared'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'buffer_written_while_read': [
        ('tle.gpu.alloc', 'buffer', 'T.alloc_shared buf'),
        ('load', 'box', 'T.copy into fragment'),
        ('tle.gpu.copy', 'box', 'T.copy into buf'),
        ('tle.gpu.local_load', 'buffer', 'T.copy buf into a fragment'),
        ('tle.gpu.local_store', 'buffer', 'T.Parallel into the buffer'),
        ('tle.gpu.local_load', 'buffer', 'T.copy buf into a fragment'),
        ('tle.gpu.local_store', 'buffer', 'T.Parallel into the buffer'),
        ('tle.gpu.local_load', 'buffer', 'reads buf in place'),
        ('store', 'box', 'T.copy from fragment'),
        ('tle.gpu.local_store', 'buffer', 'T.Parallel into the buffer'),
        ('store', 'box', 'T.copy from shared'),
        ('tle.gpu.local_load', 'buffer', 'reads buf in place'),
        ('load', 'box', 'T.copy into fragment'),
        ('tle.gpu.local_store', 'buffer', 'T.copy from a fragment buffer'),
        ('tle.gpu.local_load', 'buffer', 'reads buf in place'),
        ('tle.gpu.local_store', 'buffer', 'T.Parallel into the buffer'),
        ('store', 'box', 'T.copy from fragment'),
        ('tle.gpu.local_load', 'buffer', 'reads buf in place'),
    ],
    'unit_and_pair_axes': [
        ('load', 'strided', 'T.Parallel into fragment'),
        ('load', 'box', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'strided', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'launch_two_stages': [
        ('load', 'box', 'T.Parallel into shared'),
        ('load', 'box', 'T.copy into shared'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'launch_one_stage': [
        ('load', 'box', 'T.Parallel into shared'),
        ('load', 'box', 'T.copy into shared'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'branch_accumulations': [
        ('load', 'box', 'T.copy into shared'),
        ('load', 'box', 'T.copy into shared'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'scalar', 'scalar statement'),
    ],
    'buffer_versions': [
        ('tle.gpu.alloc', 'buffer', 'T.alloc_shared buf'),
        ('tle.gpu.alloc', 'buffer', 'T.alloc_shared aux'),
        ('tle.gpu.copy', 'box', 'T.copy into buf'),
        ('tle.gpu.local_load', 'buffer', 'T.copy buf into a fragment'),
        ('tle.gpu.copy', 'box', 'T.copy into buf'),
        ('tle.gpu.local_load', 'buffer', 'T.copy buf into a fragment'),
        ('tle.gpu.local_store', 'buffer', 'T.Parallel into the buffer'),
        ('tle.gpu.local_load', 'buffer', 'reads aux in place'),
        ('tle.gpu.local_store', 'buffer', 'T.Parallel into the buffer'),
        ('tle.gpu.local_store', 'buffer', 'T.Parallel into the buffer'),
        ('tle.gpu.local_load', 'buffer', 'reads buf in place'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'index_tile_uses': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'gather', 'T.Parallel into fragment'),
        ('store', 'scalar', 'scalar statement'),
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into fragment'),
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('load', 'box', 'T.Parallel into shared in stage 0 of T.Pipelined'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'strided_dot_operands': [
        ('load', 'strided', 'T.Parallel into shared'),
        ('load', 'strided', 'T.Parallel into shared'),
        ('load', 'box', 'T.Parallel into shared'),
        ('load', 'box', 'T.copy into shared'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'gathers_without_other': [
        ('load', 'box', 'read at each use'),
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('load', 'scalar', 'scalar expression'),
        ('load', 'box', 'T.Parallel into shared'),
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.Parallel'),
        ('store', 'box', 'T.Parallel'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'empty_body': [],
    'partly_named_offsets': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'bound_lets': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'scalar_read_twice': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],

    'loop_bounds': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'scalar', 'scalar expression'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'pipelined_lookups': [
        ('load', 'box', 'T.Parallel into fragment'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into fragment'),
        ('load', 'box', 'read at each use'),
        ('load', 'gather', 'T.Parallel into shared'),
        ('store', 'box', 'T.copy from fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'alignment_hints': [
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'runtime_step': [
        ('load', 'box', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'block_pointers': [
        ('load', 'box', 'T.Parallel into shared'),
        ('load', 'box', 'T.Parallel into shared'),
        ('store', 'box', 'T.Parallel'),
    ],
    'atomic_or': [
        ('load', 'box', 'T.copy into fragment'),
        ('atomic', 'general', 'T.atomic_or per element'),
    ],
    'join_split_interleave': [
        ('load', 'box', 'T.copy into fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
    'libdevice_and_umulhi': [
        ('load', 'box', 'T.Parallel into fragment'),
        ('store', 'box', 'T.copy from fragment'),
        ('load', 'box', 'T.copy into fragment'),
        ('store', 'box', 'T.copy from fragment'),
    ],
}
KERNELS = dict(example_kernels())


def plan(name):
    if name in CASES:
        kernel, make = CASES[name]
        report = lower_example(kernel, "tilelang", make("cpu")).compiled.access_report
    else:
        report = lower_example(KERNELS[name], "tilelang").compiled.access_report
    # the reason after "(" and the pipelining details after "," vary in wording; the decision does not
    return [(op, kind, how.split(" (")[0].split(",")[0]) for _, op, kind, how in report]


def test_every_kernel_and_case_has_a_plan():
    assert set(PLANS) == set(KERNELS) | set(CASES)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_access_plan(name):
    assert plan(name) == PLANS[name]
