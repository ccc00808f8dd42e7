"""Correctness tests for kernels/ run on CPU through the Triton interpreter.

TRITON_INTERPRET=1 is set at the very top, before anything imports triton, because
triton reads it when kernels are decorated; setting it later would try to compile
for a GPU that this machine does not have.

Outputs are allocated by the launch functions, so to prove every element is written
we make torch.empty/empty_like return NaN-filled tensors during the call: any element
a kernel forgets to store stays NaN and fails the no-NaN check.
"""
import os

os.environ["TRITON_INTERPRET"] = "1"


import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

from aot_tune.runtime import TuningWarning, launch_with_config  # noqa: E402

from kernels import gemm, rmsnorm, softmax, vector_add  # noqa: E402

# bfloat16: the interpreter stores it as raw uint16 in numpy, so arithmetic done
# directly on bf16 values (x + y, tl.dot) is wrong; kernels that upcast to fp32 before
# computing (softmax, rmsnorm) are fine. So bf16 is tested only for those two.
FLOAT_DTYPES = [torch.float16, torch.float32]
UPCAST_DTYPES = FLOAT_DTYPES + [torch.bfloat16]
TOL = {torch.float32: (1e-4, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}


@pytest.fixture
def poisoned(monkeypatch):
    """Make output allocations NaN-filled so unwritten elements are detectable."""
    real_empty, real_empty_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(float("nan")))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: real_empty_like(*a, **k).fill_(float("nan")))


def check(out: torch.Tensor, ref: torch.Tensor) -> None:
    """Same shape/dtype, every element written (no NaN), and close to the reference."""
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert not torch.isnan(out).any(), "output has NaN: unwritten element or bad math"
    rtol, atol = TOL[out.dtype]
    torch.testing.assert_close(out.float(), ref.float(), rtol=rtol, atol=atol)


def row_configs(N: int) -> list[dict]:
    """Softmax/rmsnorm configs: BLOCK_N must cover N, so derive it from N."""
    p = triton.next_power_of_2(N)
    return [
        {"BLOCK_N": p, "num_warps": 1, "num_stages": 1},
        {"BLOCK_N": 2 * p, "num_warps": 4, "num_stages": 2},
    ]


# -- vector_add ---------------------------------------------------------------

ADD_CONFIGS = [
    None,  # table path (the interpreter table)
    {"BLOCK_SIZE": 128, "num_warps": 2, "num_stages": 1},
    {"BLOCK_SIZE": 512, "num_warps": 8, "num_stages": 1},
]


@pytest.mark.parametrize("config", ADD_CONFIGS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("n", [1, 1000, 4097])
def test_vector_add(n, dtype, config, poisoned):
    """``add`` takes no config: an explicit one is forced the way ``doit tune`` forces candidates."""
    inputs = vector_add.make_inputs({"n": n}, dtype, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)  # n=1 and n=4097 are not tuned: nearest key
        if config is None:
            out = vector_add.add(*inputs)
        else:
            out = launch_with_config(vector_add.add, inputs, config, kernel="vector_add")
    check(out, vector_add.reference(*inputs))


# -- softmax / rmsnorm --------------------------------------------------------

ROW_MODULES = [(softmax, softmax.softmax), (rmsnorm, rmsnorm.rmsnorm)]


@pytest.mark.parametrize("variant", [0, 1])
@pytest.mark.parametrize("dtype", UPCAST_DTYPES)
@pytest.mark.parametrize("M,N", [(1, 1), (7, 100), (33, 257)])
@pytest.mark.parametrize("mod,launch", ROW_MODULES, ids=["softmax", "rmsnorm"])
def test_rowwise(mod, launch, M, N, dtype, variant, poisoned):
    inputs = mod.make_inputs({"M": M, "N": N}, dtype, "cpu")
    check(launch(*inputs, config=row_configs(N)[variant]), mod.reference(*inputs))


@pytest.mark.parametrize("mod,launch", ROW_MODULES, ids=["softmax", "rmsnorm"])
def test_rowwise_table_default_widens(mod, launch, poisoned):
    """N above the default BLOCK_N (1024): the table path must widen BLOCK_N itself."""
    inputs = mod.make_inputs({"M": 2, "N": 1500}, torch.float32, "cpu")
    check(launch(*inputs), mod.reference(*inputs))


@pytest.mark.parametrize("mod,launch", ROW_MODULES, ids=["softmax", "rmsnorm"])
def test_rowwise_explicit_block_too_small(mod, launch):
    inputs = mod.make_inputs({"M": 2, "N": 100}, torch.float32, "cpu")
    with pytest.raises(ValueError, match="BLOCK_N"):
        launch(*inputs, config={"BLOCK_N": 64, "num_warps": 4, "num_stages": 1})


def test_softmax_large_logits():
    """Subtracting the row max keeps exp() finite even for logits near fp32 overflow."""
    x = torch.tensor([[1000.0, 999.0, -1000.0], [88.0, 89.0, 90.0]])
    out = softmax.softmax(x, config={"BLOCK_N": 4, "num_warps": 1, "num_stages": 1})
    check(out, softmax.reference(x))


# -- gemm ---------------------------------------------------------------------

GEMM_CONFIGS = [
    None,  # table path (default config)
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 3, "num_warps": 4, "num_stages": 2},
    {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 1, "num_warps": 2, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16, "GROUP_M": 8, "num_warps": 8, "num_stages": 4},
]


@pytest.mark.parametrize("config", GEMM_CONFIGS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("M,N,K", [(33, 65, 47), (64, 64, 64), (128, 80, 96), (1, 17, 5)])
def test_gemm(M, N, K, dtype, config, poisoned):
    inputs = gemm.make_inputs({"M": M, "N": N, "K": K}, dtype, "cpu")
    check(gemm.matmul(*inputs, config=config), gemm.reference(*inputs))


def test_gemm_strided_operands(poisoned):
    """Strides are honoured: transposed views of A and B need no copy."""
    a = torch.randn(47, 33).t()  # (33, 47), column-major
    b = torch.randn(65, 47).t() / 7  # (47, 65), column-major
    check(gemm.matmul(a, b, config=GEMM_CONFIGS[1]), gemm.reference(a, b))


# -- make_inputs contract -----------------------------------------------------

@pytest.mark.parametrize(
    "mod,shape,n_inputs",
    [
        (vector_add, {"n": 10}, 2),
        (softmax, {"M": 3, "N": 10}, 1),
        (rmsnorm, {"M": 3, "N": 10}, 2),
        (gemm, {"M": 3, "N": 10, "K": 4}, 2),
    ],
)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_make_inputs(mod, shape, n_inputs, device):
    """Fresh, non-trivial inputs of the requested dtype/device (meta is used by the tuner)."""
    inputs = mod.make_inputs(shape, torch.float16, device)
    assert isinstance(inputs, tuple) and len(inputs) == n_inputs
    assert all(t.dtype == torch.float16 and t.device.type == device for t in inputs)
    if device == "cpu":
        again = mod.make_inputs(shape, torch.float16, device)
        for t, u in zip(inputs, again):
            assert t.float().std() > 0 and not torch.equal(t, u)
