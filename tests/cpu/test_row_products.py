"""Which TileLang products keep whole rows per warp (T.GemmWarpPolicy.FullRow) and read their A operand from
registers (lowering/tilelang/row_products.py): attention's two products do, a plain matmul does not, nor a
product whose rows do not divide among the warps."""
import re

import pytest

from kernel_cases import example_kernels, lower_example
from tilelang_oracle import needs_tilelang

KERNELS = dict(example_kernels())


def gemms(source: str) -> list[str]:
    return re.findall(r"T\.gemm\(.*\)", source)


def test_attention_forward_keeps_rows_per_warp_and_multiplies_p_from_registers():
    source = lower_example(KERNELS["flash_attention.flash_attention_fwd_kernel"], "tilelang").source
    scores, weighted = gemms(source)
    assert scores.endswith("transpose_B=True, policy=T.GemmWarpPolicy.FullRow)")
    assert weighted.endswith("policy=T.GemmWarpPolicy.FullRow)")
    p = weighted[len("T.gemm("):].split(",")[0]                      # the A operand: a fragment
    assert f"{p} = T.alloc_fragment(" in source and f"{p} = T.alloc_shared(" not in source


def test_a_plain_matmul_keeps_the_default_policy():
    source = lower_example(KERNELS["examples.matmul.matmul_kernel"], "tilelang").source
    assert gemms(source) and not any("policy=" in gm for gm in gemms(source))


def test_rows_that_do_not_divide_among_the_warps_keep_the_default_policy():
    # 64 heads x 8 warps: 8 rows a warp, fewer than the 16 a warp's slice of a product holds
    kernel = KERNELS["sparse_mla_attention.sparse_mla_fwd_kernel"]
    assert not any("policy=" in gm for gm in gemms(lower_example(kernel, "tilelang", num_warps=8).source))
    # at 4 warps they divide: the scores and the weighted sum keep their rows, P comes from registers
    four = gemms(lower_example(kernel, "tilelang", num_warps=4).source)
    assert all("FullRow" in gm for gm in four)


@needs_tilelang
@pytest.mark.slow
def test_the_register_operand_form_builds_for_sm90a():
    lowered = lower_example(KERNELS["flash_attention.flash_attention_bwd_dkdv_kernel"], "tilelang")
    assert all("FullRow" in gm for gm in gemms(lowered.source))
    assert "__global__" in lowered.stage("cuda")


def test_an_accumulator_carried_out_of_a_loop_is_one_family():
    """dq in the gated delta rule's dqkwg kernel: accumulated over V blocks in a loop, then, after it, rescaled
    per row and accumulated once more by another product whose result is reduced along its rows. Both products
    write one fragment: both keep whole rows per warp (split, TileLang finds two layouts for it and stops)."""
    source = lower_example(KERNELS["gated_delta_rule.gdr_dqkwg_kernel"], "tilelang").source
    into_dq = [gm for gm in gemms(source) if re.search(r", dq_state[,)]", gm)]
    assert len(into_dq) == 2 and all("FullRow" in gm for gm in into_dq)


def test_a_product_scaled_by_a_loaded_row_vector_keeps_its_rows():
    """The gated delta rule's output: the inter-chunk product is scaled by exp(G) per row, a vector the kernel
    loads and also uses with the FullRow scores; its fragment has one layout, so the product keeps rows too."""
    source = lower_example(KERNELS["gated_delta_rule.gdr_output_kernel"], "tilelang").source
    assert all("FullRow" in gm for gm in gemms(source))


def test_a_32_bit_a_operand_is_read_from_shared_memory():
    """The WY backward in fp32: -Ai^T dAi Ai^T chains two FullRow products, but a TF32 A operand's register
    layout is not the accumulator's (it is for 16-bit elements), so the first product's result is staged."""
    source = lower_example(KERNELS["gated_delta_rule.gdr_wy_backward_kernel"], "tilelang").source
    chained = [gm for gm in gemms(source) if gm.endswith("transpose_B=True, policy=T.GemmWarpPolicy.FullRow)")
               and ", ai, " in gm]
    assert chained
    for gm in chained:
        a = gm[len("T.gemm("):].split(",")[0]
        assert f"{a} = T.alloc_shared(" in source, gm


def test_addresses_are_written_at_their_uses():
    """An index tile (an address from index ranges and scalars) is not held in a fragment: stores of products
    of different warp layouts share it, and one fragment would give them one layout."""
    source = lower_example(KERNELS["gated_delta_rule.gdr_dqkwg_kernel"], "tilelang").source
    assert "'int32')" not in "".join(line for line in source.splitlines() if "alloc_fragment" in line)


def test_a_score_bias_loaded_tile_by_tile_keeps_p_in_registers():
    """SiLU attention with a bias: the scores plus a bias tile the kernel loads element by element feed the
    weighted sum. The loaded tile takes the layout its use gives it, so both products keep whole rows per warp
    and P is the second's A operand in registers (counted as another layout, it split the two products and
    TileLang refused the layouts of flash_attention's forward with a bias at D128)."""
    source = lower_example(KERNELS["silu_attention.silu_attention_fwd_kernel"], "tilelang").source
    assert "bias_ptr[" in source
    scores, weighted = gemms(source)
    assert "FullRow" in scores and "FullRow" in weighted
    p = weighted[len("T.gemm("):].split(",")[0]
    assert f"{p} = T.alloc_fragment(" in source
