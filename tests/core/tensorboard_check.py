"""Reads an lmforge event folder with TensorBoard's own loader and checks scalars and text.

usage: tensorboard_check.py DIR 'TAG=STEP:VALUE,...' ...   (a VALUE that is not a number is text)
Exit 0 when every expected (step, value) is there, in order, and no other step is (values to a
relative 1e-5: the file holds float32); prints what it read.
"""
import math
import sys

from tensorboard.backend.event_processing import event_accumulator


def main() -> int:
    acc = event_accumulator.EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    print("tensorboard reads:", {k: v for k, v in tags.items() if v})
    failed = 0
    for spec in sys.argv[2:]:
        tag, points = spec.split("=", 1)
        want = [p.split(":", 1) for p in points.split(",")]
        try:
            float(want[0][1])
            got = [(e.step, e.value) for e in acc.Scalars(tag)]
            # float32 in the file, 6 significant digits in the expectation
            ok = len(got) == len(want) and all(
                gs == int(ws) and math.isclose(gv, float(wv), rel_tol=1e-5) for (gs, gv), (ws, wv) in zip(got, want))
        except ValueError:
            got = [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)]
            ok = got == [(int(s), v) for s, v in want]
        print(("ok  " if ok else "FAIL"), tag, got)
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
