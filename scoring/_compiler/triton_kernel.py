"""The Triton source of the ``fused`` walk on CUDA (see :mod:`.triton_walk`, which
imports this module only when a kernel is needed: Triton is optional on CPU).

Node words are walk.cpp's: the feature in the low 28 bits, then default-left (bit 28),
missing-as-zero (29) and categorical (30); default-left is copied to the sign bit (31),
which the walk tests.  A node is read in one 8-byte load where it fits: a top node's
word beside its float32 threshold (``top_word``, float32 rows), a linked node's word
beside its first child (``link_word``).
"""

import triton
import triton.language as tl


@triton.jit
def _goes_left(v, th, p, zero, ZERO: tl.constexpr):  # NodeTest without categories
    default_left = p < 0  # bit 28 copied to the sign
    if ZERO:
        missing = (v != v) | (((p & (1 << 29)) != 0) & (tl.abs(v) <= zero))
        left = tl.where(missing, default_left, v <= th)
    else:  # the same test: NaN is not <= th, so only the default sends it left
        left = (v <= th) | (default_left & (v != v))
    return left


@triton.jit
def _feature(p, OFF32: tl.constexpr):  # the node's feature, at the width offsets take
    if OFF32:  # noqa: SIM108 (a statement on a constexpr: compiled away)
        feature = p & 0xFFFFFFF
    else:
        feature = (p & 0xFFFFFFF).to(tl.int64)
    return feature


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
def _walked(x, row_at, stride_feature, t, zero, top_packed, top_threshold, top_word, top_node,
            top_exit, tree_levels, link_word, threshold, cat_row, cat_unknown_left, bits_left,
            bits_known, words, BLOCK: tl.constexpr, TOP: tl.constexpr, ZERO: tl.constexpr,
            CAT: tl.constexpr, BEFORE_TRUNC: tl.constexpr, WORD: tl.constexpr,
            OFF32: tl.constexpr):  # fmt: skip
    """Tree ``t``'s leaf for each row: the walk's node index of it."""
    inner: tl.constexpr = (1 << TOP) - 1
    # The heap-ordered top by index arithmetic on the top tables' own index n: the
    # children of the tree's local node j are 2j + 1 and 2j + 2, so those of
    # n = t * inner + j are 2n + 1 - t * inner and one more.
    twice = 2 - t * inner
    n = tl.zeros([BLOCK], dtype=tl.int32) + t * inner
    for _level in tl.static_range(TOP):
        if WORD:  # low half the node's word, high half its threshold's bits
            w = tl.load(top_word + n)
            p = w.to(tl.int32)
            th = (w >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        else:
            p = tl.load(top_packed + n)
            th = tl.load(top_threshold + n)
        v = tl.load(x + (row_at + _feature(p, OFF32) * stride_feature))
        left = _goes_left(v, th, p, zero, ZERO)
        if CAT:
            left = _category_left(v, left, p, tl.load(top_node + n), cat_row,
                                  cat_unknown_left, bits_left, bits_known, words,
                                  BEFORE_TRUNC)  # fmt: skip
        n = 2 * n + twice - left.to(tl.int32)
    node = tl.load(top_exit + n + t - inner)  # t * (inner + 1) + (n - t * inner) - inner
    for _level in range(tl.load(tree_levels + t)):  # linked: first child + the test
        w = tl.load(link_word + node)  # low half the node's word, high half its child
        p = w.to(tl.int32)
        v = tl.load(x + (row_at + _feature(p, OFF32) * stride_feature))
        left = _goes_left(v, tl.load(threshold + node), p, zero, ZERO)
        if CAT:
            left = _category_left(v, left, p, node, cat_row, cat_unknown_left, bits_left,
                                  bits_known, words, BEFORE_TRUNC)  # fmt: skip
        node = (w >> 32).to(tl.int32) + 1 - left.to(tl.int32)
    return node


@triton.jit
def walk(x, stride_row, stride_feature, n_rows, out, leaf_out, zero_ptr,
         top_packed, top_threshold, top_word, top_node, top_exit, tree_levels,
         link_word, threshold, value, native_id, tree_order, tree_from, tree_to,
         cat_row, cat_unknown_left, bits_left, bits_known,
         n_trees, n_outputs, words,
         TOP: tl.constexpr, BLOCK: tl.constexpr, ZERO: tl.constexpr, CAT: tl.constexpr,
         BEFORE_TRUNC: tl.constexpr, VECTOR: tl.constexpr, LEAVES: tl.constexpr,
         WORD: tl.constexpr, OFF32: tl.constexpr, OUTPUTS: tl.constexpr,
         NODES: tl.constexpr = False, FROM_NODES: tl.constexpr = False):  # fmt: skip
    """Program (i, k): rows [i * BLOCK, (i + 1) * BLOCK) through the trees that add to
    output k, in tree order, onto ``out[:, k]`` (or, with LEAVES, each row's native leaf
    id per tree into ``leaf_out``, program axis 1 of size one).  WORD: the top is read
    from ``top_word`` (float32 rows), else from ``top_packed`` and ``top_threshold``.
    OFF32: every offset into ``x`` fits 32 bits (one multiply-add, not wide ones).
    OUTPUTS: vector leaves walked once, every output's sum in a column of a
    ``[BLOCK, OUTPUTS]`` accumulator (OUTPUTS a power of two, at least n_outputs; 0: one
    program per output, as for scalar leaves).  A small batch's trees split over
    programs, in two launches: LEAVES with NODES writes each row's leaf (the walk's own
    node) per tree, program axis 1 a range of trees; then FROM_NODES adds those leaves'
    values in tree order, as the walk would, reading ``leaf_out`` instead of walking."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    k = tl.program_id(1)
    live = rows < n_rows
    # Lanes past the last row read row 0 (unmasked loads); nothing of theirs is stored.
    # Integer arguments are never converted with .to(): Triton's JIT passes one equal to
    # 1 as a plain constant, and one within 32 bits as an int32 (what OFF32 relies on).
    if OFF32:  # every offset into x within 32 bits: one multiply-add per value read
        row_at = tl.where(live, rows, 0).to(tl.int32) * stride_row
    else:
        row_at = tl.where(live, rows, 0) * stride_row
    zero = tl.load(zero_ptr)
    if OUTPUTS:
        column = tl.arange(0, OUTPUTS)
        cell = rows[:, None] * n_outputs + column[None, :]
        is_output = column[None, :] < n_outputs
        acc = tl.load(out + cell, mask=live[:, None] & is_output, other=0)
    elif not LEAVES:
        acc = tl.load(out + rows * n_outputs + k, mask=live, other=0)
    for i in range(tl.load(tree_from + k), tl.load(tree_to + k)):
        t = tl.load(tree_order + i)
        if FROM_NODES:  # the leaf the first launch found
            node = tl.load(leaf_out + tl.where(live, rows, 0) * n_trees + t)
        else:
            node = _walked(x, row_at, stride_feature, t, zero, top_packed, top_threshold,
                           top_word, top_node, top_exit, tree_levels, link_word, threshold,
                           cat_row, cat_unknown_left, bits_left, bits_known, words, BLOCK,
                           TOP, ZERO, CAT, BEFORE_TRUNC, WORD, OFF32)  # fmt: skip
        if LEAVES and NODES:
            tl.store(leaf_out + rows * n_trees + t, node, mask=live)
        elif LEAVES:
            tl.store(leaf_out + rows * n_trees + t, tl.load(native_id + node), mask=live)
        elif OUTPUTS:
            at = node.to(tl.int64)[:, None] * n_outputs + column[None, :]
            acc += tl.load(value + at, mask=is_output, other=0)
        elif VECTOR:
            acc += tl.load(value + node.to(tl.int64) * n_outputs + k)
        else:
            acc += tl.load(value + node)
    if OUTPUTS:
        tl.store(out + cell, acc, mask=live[:, None] & is_output)
    elif not LEAVES:
        tl.store(out + rows * n_outputs + k, acc, mask=live)
