"""Backward kernels of Gemm, linear and MatMul vs PyTorch 1.13 autograd
(tests/train/grad_torch_case.py): every transA / transB with every shape of
C, B and C as initializers or graph inputs; Gemm with a constant B made
qfold's linear by canonicalize; MatMul with 1-D operands and broadcast
batch dims."""
import argparse
import sys

import numpy as np

import grad_torch_case as gc


def gemm_kw(ta, tb, alpha, beta):
    """The keyword arguments of grad_torch_case_torch's "gemm"."""
    return {"ta": ta, "tb": tb, "alpha": alpha, "beta": beta}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(3)

    def t(*shape):
        return rng.uniform(-1, 1, shape).astype(np.float32)

    ok = True
    M, K, N = 3, 5, 4
    cshapes = {"MN": (M, N), "N": (N,), "1N": (1, N), "M1": (M, 1), "1": (1,), "scalar": ()}
    k = 0
    for ta in (0, 1):
        for tb in (0, 1):
            for cname, cs in list(cshapes.items()) + [("none", None)]:
                a = t(K, M) if ta else t(M, K)
                b = t(N, K) if tb else t(K, N)
                c = None if cs is None else t(*cs)
                alpha, beta = 0.7, 1.3
                const = k % 2 == 1
                k += 1
                ins = [a, b] + ([c] if c is not None else [])
                ok &= gc.run(args, "gemm_ta%d_tb%d_c%s%s" % (ta, tb, cname, "_const" if const else ""), "Gemm",
                             "gemm", ins, params=[False, const, const][:len(ins)],
                             attrs={"transA": ta, "transB": tb, "alpha": alpha, "beta": beta},
                             kw=gemm_kw(ta, tb, alpha, beta))
    ok &= gc.run(args, "gemm_beta0", "Gemm", "gemm", [t(M, K), t(K, N), t(M, N)],
                 attrs={"beta": 0.0}, kw=gemm_kw(0, 0, 1.0, 0.0))

    # Gemm with a constant B: canonicalize makes it linear(x, W [out, in], b).
    x = t(M, K)
    w = t(N, K)  # transB=1: B is W itself
    b = t(N)
    ok &= gc.run(args, "linear_transB", "Gemm", "linear",
                 [x, w, b], params=[False, True, True], attrs={"transB": 1}, passes=["canonicalize"])
    ok &= gc.run(args, "linear_nobias", "Gemm", "linear",
                 [x, w], params=[False, True], attrs={"transB": 1}, passes=["canonicalize"])
    # transB=0: W = B^T (a new constant), the bias [1, N] flattened to [N].
    bt = np.ascontiguousarray(w.T)
    b1 = b.reshape(1, N)
    ok &= gc.run(args, "linear_from_B", "Gemm", "matmul_add", [x, bt, b1],
                 params=[False, True, True], passes=["canonicalize"],
                 ref_grads=lambda g: [g[0], np.ascontiguousarray(g[1].T), g[2].reshape(N)])

    mm = [((3, 5), (5, 4)), ((5,), (5, 4)), ((3, 5), (5,)), ((5,), (5,)), ((5,), (2, 5, 4)),
          ((2, 3, 5), (5,)), ((2, 3, 5), (5, 4)), ((2, 3, 5), (1, 5, 4)), ((3, 5), (2, 5, 4)),
          ((1, 3, 5), (2, 5, 4)), ((2, 3, 5), (2, 5, 4)), ((2, 1, 3, 5), (4, 5, 2)),
          ((3, 1, 2, 5), (1, 2, 5, 3))]
    for i, (sa, sb) in enumerate(mm):
        const = i % 2 == 1
        name = "matmul_%s_x_%s%s" % ("x".join(map(str, sa)), "x".join(map(str, sb)), "_constB" if const else "")
        ok &= gc.run(args, name, "MatMul", "matmul", [t(*sa), t(*sb)], params=[False, const])
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
