"""The Triton source of the ``fused`` walk on CUDA (see :mod:`.triton_walk`, which
imports this module only when a kernel is needed: Triton is optional on CPU).

Node words are walk.cpp's: the feature in the low 28 bits, then default-left (bit 28),
missing-as-zero (29) and categorical (30).
"""

import triton
import triton.language as tl


@triton.jit
def _goes_left(v, th, p, zero, ZERO: tl.constexpr):  # NodeTest without categories
    left = v <= th
    missing = v != v
    if ZERO:
        missing = missing | (((p & (1 << 29)) != 0) & (tl.abs(v) <= zero))
    left = tl.where(missing, (p & (1 << 28)) != 0, left)
    return left


@triton.jit
def _category_left(v, left, p, n, cat_row, cat_unknown_left, bits_left, bits_known, words,
                   BEFORE_TRUNC: tl.constexpr):  # fmt: skip
    # walk.cpp's category_left: trunc(v) >= 0 is v > -1; trunc(v) < 32 w is v < 32 w.
    if BEFORE_TRUNC:  # noqa: SIM108 (a statement on a constexpr: compiled away)
        valid = v >= 0
    else:
        valid = v > -1
    valid = valid & (v < words * 32)
    code = tl.where(valid, v, 0).to(tl.int32)
    at = tl.load(cat_row + n) * words + (code >> 5)
    bit = code & 31
    in_left = ((tl.load(bits_left + at) >> bit) & 1) != 0
    known = ((tl.load(bits_known + at) >> bit) & 1) != 0
    unknown = tl.load(cat_unknown_left + n) != 0
    cat = tl.where(valid & known, in_left, unknown)
    return tl.where(((p & (1 << 30)) != 0) & (v == v), cat, left)


@triton.jit
def walk(x, stride_row, stride_feature, n_rows, out, leaf_out, zero_ptr,
         top_packed, top_threshold, top_node, top_exit, tree_levels,
         packed, threshold, child, value, native_id, tree_order, tree_from, tree_to,
         cat_row, cat_unknown_left, bits_left, bits_known,
         n_trees, n_outputs, words,
         TOP: tl.constexpr, BLOCK: tl.constexpr, ZERO: tl.constexpr, CAT: tl.constexpr,
         BEFORE_TRUNC: tl.constexpr, VECTOR: tl.constexpr, LEAVES: tl.constexpr):  # fmt: skip
    """Program (i, k): rows [i * BLOCK, (i + 1) * BLOCK) through the trees that add to
    output k, in tree order, onto ``out[:, k]`` (or, with LEAVES, each row's native leaf
    id per tree into ``leaf_out``, program axis 1 of size one)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    k = tl.program_id(1)
    live = rows < n_rows
    x_row = x + rows * stride_row
    zero = tl.load(zero_ptr)
    if not LEAVES:
        acc = tl.load(out + rows * n_outputs + k, mask=live, other=0)
    inner: tl.constexpr = (1 << TOP) - 1
    for i in range(tl.load(tree_from + k), tl.load(tree_to + k)):
        t = tl.load(tree_order + i)
        node = tl.zeros([BLOCK], dtype=tl.int32)
        for _level in tl.static_range(TOP):  # the heap-ordered top: index arithmetic
            n = t * inner + node
            p = tl.load(top_packed + n)
            v = tl.load(x_row + (p & 0xFFFFFFF).to(tl.int64) * stride_feature, mask=live, other=0)
            left = _goes_left(v, tl.load(top_threshold + n), p, zero, ZERO)
            if CAT:
                left = _category_left(v, left, p, tl.load(top_node + n), cat_row,
                                      cat_unknown_left, bits_left, bits_known, words,
                                      BEFORE_TRUNC)  # fmt: skip
            node = 2 * node + 2 - left.to(tl.int32)
        node = tl.load(top_exit + t * (inner + 1) + node - inner)
        for _level in range(tl.load(tree_levels + t)):  # linked: first child + the test
            p = tl.load(packed + node)
            v = tl.load(x_row + (p & 0xFFFFFFF).to(tl.int64) * stride_feature, mask=live, other=0)
            left = _goes_left(v, tl.load(threshold + node), p, zero, ZERO)
            if CAT:
                left = _category_left(v, left, p, node, cat_row, cat_unknown_left, bits_left,
                                      bits_known, words, BEFORE_TRUNC)  # fmt: skip
            node = tl.load(child + node) + 1 - left.to(tl.int32)
        if LEAVES:
            tl.store(leaf_out + rows * n_trees + t, tl.load(native_id + node), mask=live)
        elif VECTOR:
            acc += tl.load(value + node.to(tl.int64) * n_outputs + k)
        else:
            acc += tl.load(value + node)
    if not LEAVES:
        tl.store(out + rows * n_outputs + k, acc, mask=live)
