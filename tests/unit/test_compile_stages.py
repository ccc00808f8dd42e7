"""The TTGIR's shared-memory lower bound, on TTGIR text in the form triton 3.6 to 3.9 print."""
from __future__ import annotations

from aot_tune.triton_compat import ttgir_shared_lower_bound

HEADER = """#shared = #ttg.nvmma_shared<{swizzlingByteWidth = 128, transposed = false, elementBitWidth = 16}>
#smem = #ttg.shared_memory
module attributes {"ttg.num-ctas" = %d : i32, "ttg.num-warps" = 8 : i32} {
  tt.func public @k(%%arg0: !tt.ptr<f16>) {
"""


def ttgir(body: str, ctas: int = 1) -> str:
    return HEADER % ctas + body + "    tt.return\n  }\n}\n"


PIPELINED = """    %a = ttg.local_alloc : () -> !ttg.memdesc<4x128x64xf16, #shared, #smem, mutable>
    %b = ttg.local_alloc : () -> !ttg.memdesc<4x64x256xf16, #shared, #smem, mutable>
    %x = ttg.memdesc_index %a[%c0] : !ttg.memdesc<4x128x64xf16, #shared, #smem, mutable> -> !ttg.memdesc<128x64xf16, #shared, #smem, mutable>
    ttg.local_dealloc %b : !ttg.memdesc<4x64x256xf16, #shared, #smem, mutable>
    ttg.local_dealloc %a : !ttg.memdesc<4x128x64xf16, #shared, #smem, mutable>
"""


def test_buffers_live_together_add_up():
    assert ttgir_shared_lower_bound(ttgir(PIPELINED)) == 4 * 128 * 64 * 2 + 4 * 64 * 256 * 2


def test_buffers_live_one_after_the_other_count_once_each():
    body = """    %a = ttg.local_alloc : () -> !ttg.memdesc<64x64xf32, #shared, #smem, mutable>
    ttg.local_dealloc %a : !ttg.memdesc<64x64xf32, #shared, #smem, mutable>
    %b = ttg.local_alloc %v : (tensor<32x32xf16>) -> !ttg.memdesc<32x32xf16, #shared, #smem>
    %c = ttg.local_load %b : !ttg.memdesc<32x32xf16, #shared, #smem> -> tensor<32x32xf16>
"""
    assert ttgir_shared_lower_bound(ttgir(body)) == 64 * 64 * 4


def test_nothing_is_proven_for_several_ctas_or_other_memory():
    assert ttgir_shared_lower_bound(ttgir(PIPELINED, ctas=2)) == 0
    tensor_memory = PIPELINED.replace("#smem", "#tmem").replace("#ttg.shared_memory", "#ttng.tensor_memory")
    assert ttgir_shared_lower_bound(ttgir(tensor_memory).replace("#smem = #ttg.shared_memory", "#tmem = #ttng.tensor_memory")) == 0
    assert ttgir_shared_lower_bound(ttgir("")) == 0
