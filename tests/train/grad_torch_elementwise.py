"""Backward kernels of Add, Sub, Mul, Div vs PyTorch 1.13 autograd
(tests/train/grad_torch_case.py) over every broadcasting pattern: a
trailing vector, either operand the broadcast one, both broadcast, scalars
([] and [1]), same shapes, interleaved size-1 dims; B an initializer in
every other case."""
import argparse
import sys

import numpy as np

import grad_torch_case as gc

PAIRS = [((2, 3, 4), (4,)), ((4,), (2, 3, 4)), ((2, 1, 4), (3, 1)), ((2, 3, 4), ()), ((), (2, 3, 4)),
         ((2, 3, 4), (1,)), ((1,), (3, 5)), ((2, 3, 5), (2, 3, 5)), ((2, 3, 1, 5), (1, 3, 4, 1)),
         ((1, 3, 1, 1), (2, 3, 5, 5)), ((3, 1), (1, 4))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(5)
    ok = True
    k = 0
    for op, fn in [("Add", "add"), ("Sub", "sub"), ("Mul", "mul"), ("Div", "div")]:
        for sa, sb in PAIRS:
            a = rng.uniform(-2, 2, sa).astype(np.float32)
            b = rng.uniform(-2, 2, sb).astype(np.float32)
            if op == "Div":  # divisors in +-[0.5, 2.5)
                b = np.where(b < 0, b - 0.5, b + 0.5).astype(np.float32)
            const = k % 2 == 1
            k += 1
            name = "%s_%s_%s%s" % (op.lower(), "x".join(map(str, sa)) or "scalar", "x".join(map(str, sb)) or "scalar",
                                   "_constB" if const else "")
            ok &= gc.run(args, name, op, fn, [a, b], params=[False, const])
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
