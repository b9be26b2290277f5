// The generic CPU walk: one kernel for every forest, the forest passed as tables.
//
// Compiled once per machine by scoring/_compiler/generic.py (its docstring says why and
// how).  Node semantics are NodeTest's (scoring/_compiler/kernels.py) exactly: go left
// iff x <= threshold (at the input's precision), NaN (and, where flagged, |x| <= the
// zero threshold) takes the default side, a categorical node reads its bitsets.  Sums
// are added tree by tree in tree order onto what `out` holds (the start), one rounding
// per addition in the accumulation type: no -ffast-math, no FMA contraction.
//
// Each tree is walked in two parts.  Its top `top_depth` levels are a complete tree in
// heap order (a leaf above the last level copied down both sides), so the next node is
// index arithmetic; the first `uniform` of them test every node of the level, whose
// parameters are the same for every row.  The top's last level names, per heap
// position, a node of the linked tables (children side by side, leaves looping to
// themselves), from which the walk goes on until the row sits on a leaf.  Siblings sit
// side by side, so the next id is the first child's plus the test (its address does not
// wait for the test), and a leaf is a node every value leaves to the left (threshold
// +inf, missing to the left) whose first child is itself.  The leaf's value is at its
// linked id.  A forest no deeper than its top never enters the linked
// part; top_depth 0 is a purely linked walk.
//
// Rows come row-major (walk_score) or as one array per feature (walk_score_columns:
// a batch's Arrow columns as they were read, so the host never transposes it).  The
// vector path copies a block of the features the forest reads into its own
// feature-major block, from either, and walks it eight rows per vector (AVX2) or, in
// the top, sixteen (AVX-512); below the top by vectors, row by row, or with the rows
// still walking packed into vectors after each level (AVX-512VL).  A call of a few
// rows walks each row through eight trees at once instead (lanes over trees).
// Which of these, per model, the schedule says (generic.py measures it).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace {

constexpr int32_t kFeatureMask = (1 << 28) - 1;
constexpr int32_t kDefaultLeft = 1 << 28;
constexpr int32_t kMissingZero = 1 << 29;
constexpr int32_t kIsCat = 1 << 30;
constexpr int32_t kMaxBlock = 256;

}  // namespace

extern "C" {

// Tables of one forest; the field order is walk_library.py's Tables.
struct Tables {
  int64_t n_trees;
  int64_t n_features;
  int64_t n_outputs;
  int32_t top_depth;           // levels of each tree's heap-ordered top
  int32_t vector_leaves;       // leaves hold n_outputs values each
  const int32_t* top_packed;   // [T, 2^top_depth - 1] feature | flags
  const void* top_threshold;   // [T, 2^top_depth - 1] at the input's precision
  const int32_t* top_node;     // [T, 2^top_depth - 1] linked id (categorical tables)
  const int32_t* top_exit;     // [T, 2^top_depth] linked id where the top ends
  const int32_t* tree_levels;  // [T] levels below the top (<= 0: none)
  // [nodes] or null: feature | default left << 16 | missing zero << 17 | (first child
  // - node) << 19, where every feature and offset fits: one gather less per level.
  const int32_t* compact;
  const int32_t* packed;       // [nodes] linked: feature | flags
  const void* threshold;       // [nodes] at the input's precision
  const int32_t* child;        // [nodes] flat id of the left child; the right one follows
  const void* value;           // [nodes] (x n_outputs), accumulation type
  const int32_t* group;        // [T] output of a scalar-leaf tree; null: output 0
  const int32_t* cat_row;      // [nodes] row of the bitset tables
  const uint8_t* cat_unknown_left;  // [nodes]
  const uint32_t* bits_left;   // [rows, words]
  const uint32_t* bits_known;  // [rows, words]
  int32_t words;
  int32_t cat_check_before_trunc;
  double zero;                 // |x| <= zero reads as missing where flagged
  const int32_t* used;         // [n_used] the features some node reads, ascending
  int64_t n_used;
  int64_t width;               // linked nodes per tree: tree t's root is t * width
};

}  // extern "C"

namespace {

// Where the rows' values are: row-major rows, or one array per feature.  `after(n)` is
// the same input from its n-th row on.
template <typename X>
struct RowMajor {
  using Value = X;
  const X* x;
  int64_t features;
  X at(int32_t r, int32_t feature) const { return x[static_cast<int64_t>(r) * features + feature]; }
  RowMajor after(int64_t rows) const { return {x + rows * features, features}; }
};

template <typename X>
struct ByFeature {
  using Value = X;
  const X* const* columns;
  int64_t first;
  X at(int32_t r, int32_t feature) const { return columns[feature][first + r]; }
  ByFeature after(int64_t rows) const { return {columns, first + rows}; }
};

// Options of one call, chosen per model by measurement (generic.py's Schedule).
struct Options {
  int32_t block;       // rows per block: a power of two, 16 to 256
  int32_t uniform;     // top levels tested node by node (vector path)
  int32_t vector;      // 1: the AVX2 path where it applies
  int32_t below;       // below the top (vector path): 0 by vectors, 1 row by row, 2 packed
  int32_t few;         // calls of at most this many rows go row by row, lanes over trees
  int32_t wide;        // 1: the top levels sixteen rows per vector (AVX-512 builds)
};

// -- scalar: any input type, categorical nodes ------------------------------------------

template <typename X>
inline int32_t category_left(const Tables& f, int32_t n, X v) {
  X trunc = std::trunc(v);
  bool valid = f.cat_check_before_trunc ? (v >= 0) : (trunc >= 0);
  valid = valid && (trunc < static_cast<X>(f.words) * 32);
  int64_t code = valid ? static_cast<int64_t>(trunc) : 0;
  int64_t at = static_cast<int64_t>(f.cat_row[n]) * f.words + (code >> 5);
  int32_t bit = static_cast<int32_t>(code & 31);
  bool in_left = (f.bits_left[at] >> bit) & 1u;
  bool known = (f.bits_known[at] >> bit) & 1u;
  return (valid && known) ? in_left : f.cat_unknown_left[n];
}

// 1 when a row with value `v` goes right at a node with packed word `pk`, threshold `t`
// and linked id `n` (for its categorical tables).
template <typename X, bool Zero, bool Cat>
inline int32_t goes_right(const Tables& f, int32_t n, int32_t pk, X v, X t) {
  int32_t left = v <= t;
  bool missing = v != v;
  if (Zero) missing = missing || ((pk & kMissingZero) && std::fabs(v) <= static_cast<X>(f.zero));
  left = missing ? ((pk & kDefaultLeft) != 0) : left;
  if (Cat && (pk & kIsCat) && v == v) left = category_left(f, n, v);
  return 1 - left;
}

#if defined(__AVX512F__)
// out[r] += value[slot[r]] for rows [0, rows): the same additions, vectors of rows.
inline void add_leaves16(const float* value, const int32_t* slot, int32_t rows, float* out) {
  for (int32_t r = 0; r < rows; r += 16) {
    const __mmask16 m = rows - r >= 16 ? 0xffff : static_cast<__mmask16>((1u << (rows - r)) - 1);
    __m512i idx = _mm512_maskz_loadu_epi32(m, slot + r);
    __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, value, 4);
    _mm512_mask_storeu_ps(out + r, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, out + r), v));
  }
}

inline void add_leaves16(const double* value, const int32_t* slot, int32_t rows, double* out) {
  for (int32_t r = 0; r < rows; r += 8) {
    const __mmask8 m = rows - r >= 8 ? 0xff : static_cast<__mmask8>((1u << (rows - r)) - 1);
    __m256i idx = _mm256_maskz_loadu_epi32(m, slot + r);
    __m512d v = _mm512_mask_i32gather_pd(_mm512_setzero_pd(), m, idx, value, 8);
    _mm512_mask_storeu_pd(out + r, m, _mm512_add_pd(_mm512_maskz_loadu_pd(m, out + r), v));
  }
}
#endif

template <typename A, bool Vec>
inline void add_leaves(const Tables& f, int64_t t, const int32_t* slot, int32_t rows, A* out) {
  const A* value = static_cast<const A*>(f.value);
  const int64_t k = f.n_outputs;
  if (Vec && k == 2) {  // two classes' fractions (a forest's): one pair per row
    for (int32_t r = 0; r < rows; ++r) {
      const A* leaf = value + static_cast<int64_t>(slot[r]) * 2;
      out[r * 2] += leaf[0];
      out[r * 2 + 1] += leaf[1];
    }
    return;
  }
  if (Vec) {
    for (int32_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < k; ++j) out[r * k + j] += value[static_cast<int64_t>(slot[r]) * k + j];
    return;
  }
  const int64_t g = f.group ? f.group[t] : 0;
#if defined(__AVX512F__)
  if (k == 1) {  // one output: the rows' sums side by side, a vector add per 16 (8) rows
    add_leaves16(value, slot, rows, out);
    return;
  }
#endif
  for (int32_t r = 0; r < rows; ++r) out[r * k + g] += value[slot[r]];
}

// Rows [0, rows) of the input: each row's leaf (linked id) in tree t into node[].
template <bool Zero, bool Cat, typename In>
inline void walk(const Tables& f, int64_t t, const In& in, int32_t rows, int32_t* node) {
  using X = typename In::Value;
  const X* top_thr = static_cast<const X*>(f.top_threshold);
  const X* thr = static_cast<const X*>(f.threshold);
  const int32_t inner = (1 << f.top_depth) - 1;
  const int32_t base = static_cast<int32_t>(t) * inner;
  for (int32_t r = 0; r < rows; ++r) node[r] = 0;
  for (int32_t level = 0; level < f.top_depth; ++level) {
    for (int32_t r = 0; r < rows; ++r) {
      const int32_t n = base + node[r];
      const int32_t p = f.top_packed[n];
      const X v = in.at(r, p & kFeatureMask);
      node[r] = 2 * node[r] + 1 + goes_right<X, Zero, Cat>(f, Cat ? f.top_node[n] : 0, p, v, top_thr[n]);
    }
  }
  const int32_t* exit = f.top_exit + static_cast<int64_t>(t) * (inner + 1) - inner;
  for (int32_t r = 0; r < rows; ++r) node[r] = exit[node[r]];
  for (int32_t level = 0; level < f.tree_levels[t]; ++level) {
    for (int32_t r = 0; r < rows; ++r) {
      const int32_t n = node[r];
      const int32_t p = f.packed[n];
      const X v = in.at(r, p & kFeatureMask);
      node[r] = f.child[n] + goes_right<X, Zero, Cat>(f, n, p, v, thr[n]);
    }
  }
}

// Rows in blocks of `block`, each block through every tree: visit(t, start, n, node)
// with the leaves (linked ids) of the block's n rows, from row `start`, in tree t.
template <bool Zero, bool Cat, typename In, typename Visit>
void each_leaf(const Tables& f, const In& in, int64_t rows, int32_t block, Visit visit) {
  int32_t node[kMaxBlock];
  for (int64_t start = 0; start < rows; start += block) {
    const int32_t n = static_cast<int32_t>(rows - start < block ? rows - start : block);
    const In xb = in.after(start);
    for (int64_t t = 0; t < f.n_trees; ++t) {
      walk<Zero, Cat>(f, t, xb, n, node);
      visit(t, start, n, node);
    }
  }
}

// Each row's native leaf id per tree into ids[rows, n_trees]: the scalar walk's leaf,
// looked up in native_id (the linked id's leaf id in the framework's own numbering).
template <bool Zero, bool Cat, typename In>
void leaves(const Tables& f, const In& in, int64_t rows, const int32_t* native_id, int32_t* ids) {
  each_leaf<Zero, Cat>(f, in, rows, kMaxBlock,
                       [&](int64_t t, int64_t start, int32_t n, const int32_t* node) {
                         int32_t* ib = ids + start * f.n_trees;
                         for (int32_t r = 0; r < n; ++r) ib[r * f.n_trees + t] = native_id[node[r]];
                       });
}

template <typename A, bool Zero, bool Cat, bool Vec, typename In>
void score(const Tables& f, const In& in, int64_t rows, A* out, int32_t block) {
  each_leaf<Zero, Cat>(f, in, rows, block,
                       [&](int64_t t, int64_t start, int32_t n, const int32_t* node) {
                         add_leaves<A, Vec>(f, t, node, n, out + start * f.n_outputs);
                       });
}

}  // namespace

#if defined(__AVX2__)

// -- AVX2: eight rows per vector, float32 inputs, numeric and zero tests ---------------
//
// The block is transposed feature-major (xt[f * block + r]), so the eight rows' values
// of one feature are one load where the node is the same for all of them (the uniform
// top levels) and a gather from one small block otherwise.  A top level's node words
// and thresholds are looked up in registers, not gathered; below the top, a schedule
// walks by vectors or row by row.
namespace {

inline __m256i splat(int32_t v) { return _mm256_set1_epi32(v); }

// A block's rows are padded to a multiple of this: whole vectors of 16 (AVX-512) or 8.
constexpr int32_t kPad = 16;

constexpr int32_t kCompactFeature = (1 << 16) - 1;
constexpr int32_t kCompactDefaultLeft = 1 << 16;
constexpr int32_t kCompactMissingZero = 1 << 17;
constexpr int32_t kCompactOffset = 19;

// 1 where a lane goes right, 0 where it goes left (goes_right without categories), for
// packed words with the default-left and missing-zero flags at DL and MZ.  Nan: the
// block may hold NaN (score8 looks once per block; where it holds none, a level is the
// compare alone, or the compare and the zero test).
template <bool Zero, bool Nan, int32_t DL = kDefaultLeft, int32_t MZ = kMissingZero>
inline __m256i right8(__m256i pk, __m256 v, __m256 th, __m256 zero) {
  __m256 left = _mm256_cmp_ps(v, th, _CMP_LE_OQ);  // false for NaN
  if (!Nan && !Zero) return _mm256_add_epi32(splat(1), _mm256_castps_si256(left));
  __m256 missing = Nan ? _mm256_cmp_ps(v, v, _CMP_UNORD_Q) : _mm256_setzero_ps();
  if (Zero) {
    __m256 small = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), zero, _CMP_LE_OQ);
    __m256i flag = _mm256_cmpeq_epi32(_mm256_and_si256(pk, splat(MZ)), splat(MZ));
    missing = _mm256_or_ps(missing, _mm256_and_ps(small, _mm256_castsi256_ps(flag)));
  }
  __m256i dl = _mm256_cmpeq_epi32(_mm256_and_si256(pk, splat(DL)), splat(DL));
  left = _mm256_blendv_ps(left, _mm256_castsi256_ps(dl), missing);
  return _mm256_add_epi32(splat(1), _mm256_castps_si256(left));  // left is -1 or 0
}

// A block's values, feature-major: feature j of row r at xt[j << log_block | r].
struct Block8 {
  const float* xt;
  int32_t log_block;
  __m256 zero;
};

inline __m256i lanes_at(int32_t r) {
  return _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), splat(r));
}

// Each lane's value of its own node's feature.
template <int32_t Mask = kFeatureMask>
inline __m256 gathered(const Block8& b, __m256i pk, __m256i lanes) {
  __m256i feature = _mm256_and_si256(pk, splat(Mask));
  return _mm256_i32gather_ps(b.xt, _mm256_add_epi32(_mm256_slli_epi32(feature, b.log_block), lanes), 4);
}

// The 8 rows at r all tested at top node n (the same for each).
template <bool Zero, bool Nan>
inline __m256i right_uniform(const Tables& f, int32_t n, const Block8& b, int32_t r) {
  const int32_t pk = f.top_packed[n];
  const float th = static_cast<const float*>(f.top_threshold)[n];
  __m256 v = _mm256_loadu_ps(b.xt + (static_cast<int64_t>(pk & kFeatureMask) << b.log_block) + r);
  return right8<Zero, Nan>(splat(pk), v, _mm256_set1_ps(th), b.zero);
}

// Entries i (0 to 8 * Regs - 1) of a level's table held in Regs registers (or on the
// stack): a permute per register (per two with AVX-512VL), blended on the index's
// higher bits.  It takes the place of gathering the level's words and thresholds: on
// Zen 4 a gather of eight costs about five times a 16-entry lookup, and one core walked
// XGBoost 500x8 at 230k -> 442k rows/s, LightGBM 500x256 (a top of 6) at 112k -> 128k.
template <int Regs>
inline __m256i lookup(const __m256i* table, __m256i i) {
  if constexpr (Regs == 1) {
    return _mm256_permutevar8x32_epi32(table[0], i);
#if defined(__AVX512VL__)
  } else if constexpr (Regs == 2) {
    return _mm256_permutex2var_epi32(table[0], i, table[1]);
#endif
  } else {
    constexpr int kBit = 2 + (Regs >= 2) + (Regs >= 4) + (Regs >= 8) + (Regs >= 16) + (Regs >= 32) +
                         (Regs >= 64);  // log2(8 * Regs) - 1: the bit that picks a half
    __m256i low = lookup<Regs / 2>(table, i);
    __m256i high = lookup<Regs / 2>(table + Regs / 2, i);
    __m256 at_sign = _mm256_castsi256_ps(_mm256_slli_epi32(i, 31 - kBit));
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(low), _mm256_castsi256_ps(high), at_sign));
  }
}

inline __m256i down(__m256i idx, __m256i right) {
  return _mm256_add_epi32(_mm256_add_epi32(idx, idx), _mm256_add_epi32(splat(1), right));
}

// One level below the top for the eight lanes at linked ids n: their next ids.
template <bool Zero, bool Nan>
inline __m256i step8(const Tables& f, const Block8& b, __m256i n, __m256i lanes) {
  __m256i first = _mm256_i32gather_epi32(f.child, n, 4);  // off the compare's path
  __m256i pk = _mm256_i32gather_epi32(f.packed, n, 4);
  __m256 th = _mm256_i32gather_ps(static_cast<const float*>(f.threshold), n, 4);
  return _mm256_add_epi32(first, right8<Zero, Nan>(pk, gathered(b, pk, lanes), th, b.zero));
}

// step8 on compact words: the first child is the node plus the word's offset.
template <bool Zero, bool Nan>
inline __m256i step8_compact(const Tables& f, const Block8& b, __m256i n, __m256i lanes) {
  __m256i pk = _mm256_i32gather_epi32(f.compact, n, 4);
  __m256 th = _mm256_i32gather_ps(static_cast<const float*>(f.threshold), n, 4);
  __m256 v = gathered<kCompactFeature>(b, pk, lanes);
  __m256i right = right8<Zero, Nan, kCompactDefaultLeft, kCompactMissingZero>(pk, v, th, b.zero);
  return _mm256_add_epi32(_mm256_add_epi32(n, _mm256_srli_epi32(pk, kCompactOffset)), right);
}

// Below the top, level by level over the block's vectors still walking (independent
// chains of gathers, which the core overlaps), until every row sits on a leaf: a leaf
// goes left to itself.
template <bool Zero, bool Nan>
void below8(const Tables& f, int64_t t, const Block8& b, int32_t rows, int32_t* node) {
  int32_t walking[kMaxBlock / 8];
  int32_t count = 0;
  for (int32_t r = 0; r < rows; r += 8) walking[count++] = r;
  for (int32_t level = 0; level < f.tree_levels[t] && count > 0; ++level) {
    int32_t still = 0;
    for (int32_t i = 0; i < count; ++i) {
      const int32_t r = walking[i];
      __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(node + r));
      __m256i next = f.compact ? step8_compact<Zero, Nan>(f, b, n, lanes_at(r))
                               : step8<Zero, Nan>(f, b, n, lanes_at(r));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(node + r), next);
      walking[still] = r;  // kept unless every lane is on its leaf: no branch to guess
      still += _mm256_movemask_epi8(_mm256_cmpeq_epi32(next, n)) != -1;
    }
    count = still;
  }
}

// below8 row by row, a row leaving the list once it sits on its leaf: each row walks
// its own path's length, where a vector walks its longest lane's (LightGBM 500x256,
// trees 17 levels deep at the median: 108k -> 117k rows/s on one core).
template <bool Zero, bool Nan, bool Compact>
void below_rows(const Tables& f, int64_t t, const Block8& b, int32_t rows, int32_t* node) {
  const float* thr = static_cast<const float*>(f.threshold);
  const float zero = static_cast<float>(f.zero);
  int32_t at[kMaxBlock];
  int32_t id[kMaxBlock];
  int32_t count = 0;
  for (int32_t r = 0; r < rows; ++r) {  // the rows the top left on an inner node
    const int32_t n = node[r];
    at[count] = r;
    id[count] = n;
    count += Compact ? (static_cast<uint32_t>(f.compact[n]) >> kCompactOffset) != 0 : f.child[n] != n;
  }
  for (int32_t level = 0; level < f.tree_levels[t] && count > 0; ++level) {
    int32_t still = 0;
    for (int32_t i = 0; i < count; ++i) {
      const int32_t r = at[i];
      const int32_t n = id[i];
      const uint32_t w = static_cast<uint32_t>(Compact ? f.compact[n] : f.packed[n]);
      const int32_t feature = static_cast<int32_t>(w & (Compact ? kCompactFeature : kFeatureMask));
      const int32_t first = Compact ? n + static_cast<int32_t>(w >> kCompactOffset) : f.child[n];
      const uint32_t dl = Compact ? kCompactDefaultLeft : kDefaultLeft;
      const uint32_t mz = Compact ? kCompactMissingZero : kMissingZero;
      const float v = b.xt[(static_cast<int64_t>(feature) << b.log_block) + r];
      bool missing = Nan && v != v;
      if (Zero) missing = missing || ((w & mz) && std::fabs(v) <= zero);
      const int32_t left = missing ? (w & dl) != 0 : v <= thr[n];
      const int32_t next = first + 1 - left;
      node[r] = next;
      at[still] = r;
      id[still] = next;
      still += next != n;
    }
    count = still;
  }
}

// One top level of 8 * Regs nodes (its first at top index `at`, heap position `first`)
// for every vector of the block, its words and thresholds held in registers.
template <bool Zero, bool Nan, int Regs>
void top_level_by_lookup(const Tables& f, const Block8& b, int32_t at, int32_t first, int32_t rows,
                         int32_t* node) {
  const float* top_thr = static_cast<const float*>(f.top_threshold);
  __m256i words[Regs], thresholds[Regs];
  for (int32_t q = 0; q < Regs; ++q) {
    words[q] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f.top_packed + at + 8 * q));
    thresholds[q] = _mm256_castps_si256(_mm256_loadu_ps(top_thr + at + 8 * q));
  }
  for (int32_t r = 0; r < rows; r += 8) {
    __m256i idx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(node + r));
    __m256i i = _mm256_sub_epi32(idx, splat(first));
    __m256i pk = lookup<Regs>(words, i);
    __m256 th = _mm256_castsi256_ps(lookup<Regs>(thresholds, i));
    idx = down(idx, right8<Zero, Nan>(pk, gathered(b, pk, lanes_at(r)), th, b.zero));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(node + r), idx);
  }
}

// Top level `level` by lookup where it has 8 to 512 nodes (levels 3 to 9: the deepest
// top is 10 levels); false where it is gathered.
template <bool Zero, bool Nan>
bool top_level_looked_up(const Tables& f, const Block8& b, int32_t base, int32_t level, int32_t rows,
                         int32_t* node) {
  const int32_t first = (1 << level) - 1;
  const int32_t at = base + first;
  switch (level) {
    case 3: top_level_by_lookup<Zero, Nan, 1>(f, b, at, first, rows, node); return true;
    case 4: top_level_by_lookup<Zero, Nan, 2>(f, b, at, first, rows, node); return true;
    case 5: top_level_by_lookup<Zero, Nan, 4>(f, b, at, first, rows, node); return true;
    case 6: top_level_by_lookup<Zero, Nan, 8>(f, b, at, first, rows, node); return true;
    case 7: top_level_by_lookup<Zero, Nan, 16>(f, b, at, first, rows, node); return true;
    case 8: top_level_by_lookup<Zero, Nan, 32>(f, b, at, first, rows, node); return true;
    case 9: top_level_by_lookup<Zero, Nan, 64>(f, b, at, first, rows, node); return true;
    default: return false;
  }
}

template <bool Zero, bool Nan>
void below(const Tables& f, int64_t t, const Block8& b, int32_t rows, const Options& o,
           int32_t* node);

// Tree t for rows [0, rows): each row's leaf (linked id) into node[].  Levels run
// outermost over the block's vectors, so the vectors' gathers are independent work
// the core overlaps (one vector's chain of gathers would leave it waiting).
template <bool Zero, bool Nan>
void walk8(const Tables& f, int64_t t, const Block8& b, int32_t rows, const Options& o,
           int32_t* node) {
  const float* top_thr = static_cast<const float*>(f.top_threshold);
  const int32_t inner = (1 << f.top_depth) - 1;
  const int32_t base = static_cast<int32_t>(t) * inner;
  const int32_t* exit = f.top_exit + static_cast<int64_t>(t) * (inner + 1) - inner;
  const int32_t tested = o.uniform < f.top_depth ? o.uniform : f.top_depth;
  for (int32_t r = 0; r < rows; r += 8) {  // the top levels, node by node
    __m256i idx = _mm256_setzero_si256();
    for (int32_t level = 0; level < tested; ++level) {
      const int32_t first = (1 << level) - 1;
      __m256i right = right_uniform<Zero, Nan>(f, base + first, b, r);
      for (int32_t k = first + 1; k < 2 * first + 1; ++k) {
        __m256i rk = right_uniform<Zero, Nan>(f, base + k, b, r);
        right = _mm256_blendv_epi8(right, rk, _mm256_cmpeq_epi32(idx, splat(k)));
      }
      idx = down(idx, right);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(node + r), idx);
  }
  for (int32_t level = tested; level < f.top_depth; ++level) {
    if (top_level_looked_up<Zero, Nan>(f, b, base, level, rows, node)) continue;
    for (int32_t r = 0; r < rows; r += 8) {
      __m256i idx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(node + r));
      __m256i n = _mm256_add_epi32(idx, splat(base));
      __m256i pk = _mm256_i32gather_epi32(f.top_packed, n, 4);
      __m256 th = _mm256_i32gather_ps(top_thr, n, 4);
      idx = down(idx, right8<Zero, Nan>(pk, gathered(b, pk, lanes_at(r)), th, b.zero));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(node + r), idx);
    }
  }
  for (int32_t r = 0; r < rows; r += 8) {
    __m256i idx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(node + r));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(node + r), _mm256_i32gather_epi32(exit, idx, 4));
  }
  below<Zero, Nan>(f, t, b, rows, o, node);
}

#if defined(__AVX512F__)
// -- AVX-512: the top levels sixteen rows per vector ------------------------------------
//
// walk8's top levels with vectors of sixteen rows and the tests as masks: a permute
// looks up among 16 entries (two registers: 32) where walk8's looks up among 8 (16),
// a gather fetches sixteen values, and the missing-value and default-side logic is mask
// arithmetic rather than blends.  Below the top, walk8's ways (over the same node[]).

inline __m512i splat16(int32_t v) { return _mm512_set1_epi32(v); }

inline __m512i lanes16(int32_t r) {
  return _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                          splat16(r));
}

// The lanes going right: right8's test as a mask.
template <bool Zero, bool Nan, int32_t DL = kDefaultLeft, int32_t MZ = kMissingZero>
inline __mmask16 right16(__m512i pk, __m512 v, __m512 th, __m512 zero) {
  const __mmask16 left = _mm512_cmp_ps_mask(v, th, _CMP_LE_OQ);  // false for NaN
  if (!Nan && !Zero) return static_cast<__mmask16>(~left);
  __mmask16 missing = Nan ? _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) : 0;
  if (Zero) {
    const __mmask16 small = _mm512_cmp_ps_mask(_mm512_abs_ps(v), zero, _CMP_LE_OQ);
    missing |= small & _mm512_test_epi32_mask(pk, splat16(MZ));
  }
  const __mmask16 dl = _mm512_test_epi32_mask(pk, splat16(DL));
  return static_cast<__mmask16>(~((left & ~missing) | (missing & dl)));
}

inline __m512i down16(__m512i idx, __mmask16 right) {
  const __m512i next = _mm512_add_epi32(_mm512_add_epi32(idx, idx), splat16(1));
  return _mm512_mask_add_epi32(next, right, next, splat16(1));
}

template <int32_t Mask = kFeatureMask>
inline __m512 gathered16(const Block8& b, __m512i pk, __m512i lanes) {
  __m512i feature = _mm512_and_si512(pk, splat16(Mask));
  return _mm512_i32gather_ps(_mm512_add_epi32(_mm512_slli_epi32(feature, b.log_block), lanes), b.xt, 4);
}

template <bool Zero, bool Nan>
inline __mmask16 right_uniform16(const Tables& f, int32_t n, const Block8& b, int32_t r, __m512 zero) {
  const int32_t pk = f.top_packed[n];
  const float th = static_cast<const float*>(f.top_threshold)[n];
  __m512 v = _mm512_loadu_ps(b.xt + (static_cast<int64_t>(pk & kFeatureMask) << b.log_block) + r);
  return right16<Zero, Nan>(splat16(pk), v, _mm512_set1_ps(th), zero);
}

// Entries i of a level's table held in Wide registers of 16 entries.
template <int Wide>
inline __m512i lookup16(const __m512i* table, __m512i i) {
  if constexpr (Wide == 1) {
    return _mm512_permutexvar_epi32(i, table[0]);
  } else if constexpr (Wide == 2) {
    return _mm512_permutex2var_epi32(table[0], i, table[1]);
  } else {
    constexpr int kBit = 4 + (Wide >= 4) + (Wide >= 8) + (Wide >= 16) + (Wide >= 32);  // picks a half
    const __mmask16 high = _mm512_test_epi32_mask(i, splat16(1 << kBit));
    return _mm512_mask_blend_epi32(high, lookup16<Wide / 2>(table, i),
                                   lookup16<Wide / 2>(table + Wide / 2, i));
  }
}

// One top level of 16 * Wide nodes (8 where Wide is 1 and the level has 8) by lookup.
template <bool Zero, bool Nan, int Wide>
void top_level16(const Tables& f, const Block8& b, int32_t at, int32_t first, int32_t rows,
                 int32_t* node, __m512 zero) {
  const float* top_thr = static_cast<const float*>(f.top_threshold);
  const __mmask16 entries = first < 15 ? static_cast<__mmask16>((1u << (first + 1)) - 1) : 0xffff;
  __m512i words[Wide], thresholds[Wide];
  for (int32_t q = 0; q < Wide; ++q) {
    words[q] = _mm512_maskz_loadu_epi32(entries, f.top_packed + at + 16 * q);
    thresholds[q] = _mm512_castps_si512(_mm512_maskz_loadu_ps(entries, top_thr + at + 16 * q));
  }
  for (int32_t r = 0; r < rows; r += 16) {
    __m512i idx = _mm512_loadu_si512(node + r);
    __m512i i = _mm512_sub_epi32(idx, splat16(first));
    __m512i pk = lookup16<Wide>(words, i);
    __m512 th = _mm512_castsi512_ps(lookup16<Wide>(thresholds, i));
    idx = down16(idx, right16<Zero, Nan>(pk, gathered16(b, pk, lanes16(r)), th, zero));
    _mm512_storeu_si512(node + r, idx);
  }
}

// One level below the top for the sixteen lanes at linked ids n: their next ids.
template <bool Zero, bool Nan, bool Compact>
inline __m512i step16(const Tables& f, const Block8& b, __m512i n, __m512i lanes, __m512 zero) {
  __m512 th = _mm512_i32gather_ps(n, f.threshold, 4);
  if (Compact) {
    __m512i pk = _mm512_i32gather_epi32(n, f.compact, 4);
    __m512 v = gathered16<kCompactFeature>(b, pk, lanes);
    const __mmask16 right =
        right16<Zero, Nan, kCompactDefaultLeft, kCompactMissingZero>(pk, v, th, zero);
    __m512i first = _mm512_add_epi32(n, _mm512_srli_epi32(pk, kCompactOffset));
    return _mm512_mask_add_epi32(first, right, first, splat16(1));
  }
  __m512i first = _mm512_i32gather_epi32(n, f.child, 4);
  __m512i pk = _mm512_i32gather_epi32(n, f.packed, 4);
  const __mmask16 right = right16<Zero, Nan>(pk, gathered16(b, pk, lanes), th, zero);
  return _mm512_mask_add_epi32(first, right, first, splat16(1));
}

// Below the top by rows (below_rows), the rows still walking packed into vectors of
// sixteen after each level (AVX-512's compress), so a vector walks only rows that have
// levels left; rows the top left on a leaf never enter.  Rows a multiple of 16.
template <bool Zero, bool Nan, bool Compact>
void below_packed16(const Tables& f, int64_t t, const Block8& b, int32_t rows, int32_t* node) {
  const __m512 zero = _mm512_set1_ps(static_cast<float>(f.zero));
  int32_t at[kMaxBlock];
  int32_t id[kMaxBlock];
  int32_t count = 0;
  for (int32_t r = 0; r < rows; r += 16) {  // the rows the top left on an inner node
    __m512i n = _mm512_loadu_si512(node + r);
    const __mmask16 inner = Compact
        ? _mm512_test_epi32_mask(_mm512_i32gather_epi32(n, f.compact, 4),
                                 splat16(~((1 << kCompactOffset) - 1)))
        : _mm512_cmpneq_epi32_mask(_mm512_i32gather_epi32(n, f.child, 4), n);
    _mm512_mask_compressstoreu_epi32(at + count, inner, lanes16(r));
    _mm512_mask_compressstoreu_epi32(id + count, inner, n);
    count += __builtin_popcount(inner);
  }
  for (int32_t level = 0; level < f.tree_levels[t] && count > 0; ++level) {
    int32_t still = 0;
    for (int32_t i = 0; i < count; i += 16) {
      const __mmask16 valid =
          count - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (count - i)) - 1);
      __m512i r = _mm512_maskz_loadu_epi32(valid, at + i);
      __m512i n = _mm512_maskz_loadu_epi32(valid, id + i);  // others: node 0, a valid id
      __m512i next = step16<Zero, Nan, Compact>(f, b, n, r, zero);
      const __mmask16 moving = valid & _mm512_cmpneq_epi32_mask(next, n);
      _mm512_mask_i32scatter_epi32(node, valid & ~moving, r, next, 4);  // on their leaves
      _mm512_mask_compressstoreu_epi32(at + still, moving, r);
      _mm512_mask_compressstoreu_epi32(id + still, moving, next);
      still += __builtin_popcount(moving);
    }
    count = still;
  }
  for (int32_t i = 0; i < count; ++i) node[at[i]] = id[i];  // on leaves at the last level
}

// walk8 with the top sixteen rows at a time; rows a multiple of 16.
template <bool Zero, bool Nan>
void walk16(const Tables& f, int64_t t, const Block8& b, int32_t rows, const Options& o,
            int32_t* node) {
  const __m512 zero = _mm512_set1_ps(static_cast<float>(f.zero));
  const int32_t inner = (1 << f.top_depth) - 1;
  const int32_t base = static_cast<int32_t>(t) * inner;
  const int32_t* exit = f.top_exit + static_cast<int64_t>(t) * (inner + 1) - inner;
  const int32_t tested = o.uniform < f.top_depth ? o.uniform : f.top_depth;
  for (int32_t r = 0; r < rows; r += 16) {  // the top levels, node by node
    __m512i idx = _mm512_setzero_si512();
    for (int32_t level = 0; level < tested; ++level) {
      const int32_t first = (1 << level) - 1;
      __mmask16 right = right_uniform16<Zero, Nan>(f, base + first, b, r, zero);
      for (int32_t k = first + 1; k < 2 * first + 1; ++k) {
        const __mmask16 at = _mm512_cmpeq_epi32_mask(idx, splat16(k));
        right = (right & ~at) | (right_uniform16<Zero, Nan>(f, base + k, b, r, zero) & at);
      }
      idx = down16(idx, right);
    }
    _mm512_storeu_si512(node + r, idx);
  }
  for (int32_t level = tested; level < f.top_depth; ++level) {
    const int32_t first = (1 << level) - 1;
    const int32_t at = base + first;
    switch (level) {  // 1 to 512 nodes: levels 0 to 9 (the deepest top is 10 levels)
      case 0: case 1: case 2: case 3: case 4:
        top_level16<Zero, Nan, 1>(f, b, at, first, rows, node, zero); break;
      case 5: top_level16<Zero, Nan, 2>(f, b, at, first, rows, node, zero); break;
      case 6: top_level16<Zero, Nan, 4>(f, b, at, first, rows, node, zero); break;
      case 7: top_level16<Zero, Nan, 8>(f, b, at, first, rows, node, zero); break;
      case 8: top_level16<Zero, Nan, 16>(f, b, at, first, rows, node, zero); break;
      default: top_level16<Zero, Nan, 32>(f, b, at, first, rows, node, zero); break;
    }
  }
  for (int32_t r = 0; r < rows; r += 16) {
    __m512i idx = _mm512_loadu_si512(node + r);
    _mm512_storeu_si512(node + r, _mm512_i32gather_epi32(idx, exit, 4));
  }
  below<Zero, Nan>(f, t, b, rows, o, node);
}
#endif

// Tree t below its top for rows [0, rows), each at the linked id in node[] where its
// top ended, as the schedule says: by vectors, row by row, or rows packed in vectors
// (AVX-512VL builds; row by row elsewhere).
template <bool Zero, bool Nan>
void below(const Tables& f, int64_t t, const Block8& b, int32_t rows, const Options& o,
           int32_t* node) {
  if (f.tree_levels[t] <= 0) return;
  if (o.below == 0) below8<Zero, Nan>(f, t, b, rows, node);
#if defined(__AVX512VL__)
  else if (o.below == 2 && f.compact) below_packed16<Zero, Nan, true>(f, t, b, rows, node);
  else if (o.below == 2) below_packed16<Zero, Nan, false>(f, t, b, rows, node);
#endif
  else if (f.compact) below_rows<Zero, Nan, true>(f, t, b, rows, node);
  else below_rows<Zero, Nan, false>(f, t, b, rows, node);
}

// -- few rows: the lanes over trees -------------------------------------------------
//
// A call of a few rows cannot fill a block's vectors, and a block's top levels cost
// the same for one row as for 256.  There each row walks eight trees at once, one lane
// per tree, from the roots down the linked tables, its values gathered straight from
// the row: XGBoost 500x8, one row per call, 62 us on the scalar path -> 6 us.  Several
// vectors of trees are in flight (independent chains of gathers) and each leaves the
// list once its eight trees sit on leaves; the leaves are then added in tree order,
// so the sums are the other paths' bit for bit.

constexpr int32_t kTreeVectors = 8;  // 64 trees in flight

// One level for the eight trees at linked ids n, the row's values at `row`.
template <bool Zero, bool Nan, bool Compact>
inline __m256i tree_step8(const Tables& f, const float* row, __m256i n, __m256 zero) {
  const float* thr = static_cast<const float*>(f.threshold);
  __m256 th = _mm256_i32gather_ps(thr, n, 4);
  if (Compact) {
    __m256i pk = _mm256_i32gather_epi32(f.compact, n, 4);
    __m256 v = _mm256_i32gather_ps(row, _mm256_and_si256(pk, splat(kCompactFeature)), 4);
    __m256i right = right8<Zero, Nan, kCompactDefaultLeft, kCompactMissingZero>(pk, v, th, zero);
    return _mm256_add_epi32(_mm256_add_epi32(n, _mm256_srli_epi32(pk, kCompactOffset)), right);
  }
  __m256i first = _mm256_i32gather_epi32(f.child, n, 4);
  __m256i pk = _mm256_i32gather_epi32(f.packed, n, 4);
  __m256 v = _mm256_i32gather_ps(row, _mm256_and_si256(pk, splat(kFeatureMask)), 4);
  return _mm256_add_epi32(first, right8<Zero, Nan>(pk, v, th, zero));
}

// Every tree's leaf (linked id) for one row into leaf[n_trees].
template <bool Zero, bool Nan, bool Compact>
void row_leaves(const Tables& f, const float* row, int32_t* leaf) {
  const __m256 zero = _mm256_set1_ps(static_cast<float>(f.zero));
  const int32_t last = static_cast<int32_t>(f.n_trees - 1);
  const __m256i step = splat(static_cast<int32_t>(f.width));
  for (int32_t t0 = 0; t0 <= last; t0 += 8 * kTreeVectors) {
    __m256i node[kTreeVectors];
    int32_t walking[kTreeVectors];
    int32_t count = 0;
    for (int32_t q = 0; q < kTreeVectors && t0 + 8 * q <= last; ++q, ++count) {
      // lanes past the last tree walk the last tree again; their leaves are not kept
      __m256i tree = _mm256_min_epi32(lanes_at(t0 + 8 * q), splat(last));
      node[q] = _mm256_mullo_epi32(tree, step);
      walking[q] = q;
    }
    const int32_t vectors = count;
    while (count > 0) {
      int32_t still = 0;
      for (int32_t i = 0; i < count; ++i) {
        const int32_t q = walking[i];
        __m256i next = tree_step8<Zero, Nan, Compact>(f, row, node[q], zero);
        walking[still] = q;  // kept unless every lane is on its leaf
        still += _mm256_movemask_epi8(_mm256_cmpeq_epi32(next, node[q])) != -1;
        node[q] = next;
      }
      count = still;
    }
    int32_t ids[8 * kTreeVectors];
    for (int32_t q = 0; q < vectors; ++q)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ids + 8 * q), node[q]);
    const int32_t kept = last + 1 - t0 < 8 * vectors ? last + 1 - t0 : 8 * vectors;
    std::memcpy(leaf + t0, ids, sizeof(int32_t) * static_cast<size_t>(kept));
  }
}

// The row's values of the features the forest reads: in place where rows are
// row-major, else copied into buf (the others are never read).
inline const float* row_at(const Tables&, const RowMajor<float>& in, int32_t r, float*) {
  return in.x + static_cast<int64_t>(r) * in.features;
}

inline const float* row_at(const Tables& f, const ByFeature<float>& in, int32_t r, float* buf) {
  for (int64_t u = 0; u < f.n_used; ++u) buf[f.used[u]] = in.at(r, f.used[u]);
  return buf;
}

template <bool Zero, bool Nan>
void row_leaves_of(const Tables& f, const float* row, int32_t* leaf) {
  if (f.compact) row_leaves<Zero, Nan, true>(f, row, leaf);
  else row_leaves<Zero, Nan, false>(f, row, leaf);
}

template <typename A, bool Zero, bool Vec, typename In>
void score_by_trees(const Tables& f, const In& in, int64_t rows, A* out) {
  std::vector<int32_t> leaf(static_cast<size_t>(f.n_trees));
  std::vector<float> buf(std::is_same_v<In, RowMajor<float>> ? 0 : static_cast<size_t>(f.n_features));
  for (int32_t r = 0; r < rows; ++r) {
    const float* row = row_at(f, in, r, buf.data());
    bool nan = row[0] != row[0];  // a leaf reads feature 0, used or not
    for (int64_t u = 0; u < f.n_used; ++u) nan = nan || row[f.used[u]] != row[f.used[u]];
    if (nan) row_leaves_of<Zero, true>(f, row, leaf.data());
    else row_leaves_of<Zero, false>(f, row, leaf.data());
    for (int64_t t = 0; t < f.n_trees; ++t) add_leaves<A, Vec>(f, t, leaf.data() + t, 1, out + r * f.n_outputs);
  }
}

// One feature's values of rows [0, rows) into col.
inline void copy_feature(const RowMajor<float>& in, int32_t j, int32_t rows, float* col) {
  for (int32_t r = 0; r < rows; ++r) col[r] = in.x[static_cast<int64_t>(r) * in.features + j];
}

inline void copy_feature(const ByFeature<float>& in, int32_t j, int32_t rows, float* col) {
  std::memcpy(col, in.columns[j] + in.first, sizeof(float) * static_cast<size_t>(rows));
}

// Eight rows' features [j, j + 8) from row-major x into xt [F, block] at row r: an 8x8
// transpose in registers, each row read and each feature written contiguously.
inline void transpose8(const RowMajor<float>& in, int32_t r, int32_t j, int32_t block, float* xt) {
  __m256 row[8];
  for (int32_t k = 0; k < 8; ++k) row[k] = _mm256_loadu_ps(in.x + static_cast<int64_t>(r + k) * in.features + j);
  __m256 lo[4], hi[4];
  for (int32_t k = 0; k < 4; ++k) {
    lo[k] = _mm256_unpacklo_ps(row[2 * k], row[2 * k + 1]);
    hi[k] = _mm256_unpackhi_ps(row[2 * k], row[2 * k + 1]);
  }
  __m256 q[8];
  for (int32_t k = 0; k < 2; ++k) {
    q[4 * k + 0] = _mm256_shuffle_ps(lo[2 * k], lo[2 * k + 1], 0x44);
    q[4 * k + 1] = _mm256_shuffle_ps(lo[2 * k], lo[2 * k + 1], 0xEE);
    q[4 * k + 2] = _mm256_shuffle_ps(hi[2 * k], hi[2 * k + 1], 0x44);
    q[4 * k + 3] = _mm256_shuffle_ps(hi[2 * k], hi[2 * k + 1], 0xEE);
  }
  for (int32_t k = 0; k < 4; ++k) {
    float* low = xt + static_cast<int64_t>(j + k) * block + r;
    float* high = xt + static_cast<int64_t>(j + k + 4) * block + r;
    _mm256_storeu_ps(low, _mm256_permute2f128_ps(q[k], q[k + 4], 0x20));
    _mm256_storeu_ps(high, _mm256_permute2f128_ps(q[k], q[k + 4], 0x31));
  }
}

// Where the forest reads most of a row's features, the whole row is transposed eight
// rows by eight features at a time: per feature, rows a row's length apart would each
// be a cache line of their own (2,000 features: 41 -> 33 ms for 20k rows, 100 trees).
inline bool transposed(const Tables& f, const RowMajor<float>& in, int32_t rows, int32_t block,
                       float* xt) {
  if (f.n_used * 2 < in.features || in.features < 64) return false;
  const int32_t whole = rows & ~7;
  const int32_t width = static_cast<int32_t>(in.features & ~int64_t{7});
  for (int32_t r = 0; r < whole; r += 8)
    for (int32_t j = 0; j < width; j += 8) transpose8(in, r, j, block, xt);
  for (int32_t j = width; j < in.features; ++j)
    for (int32_t r = 0; r < whole; ++r) xt[static_cast<int64_t>(j) * block + r] = in.at(r, j);
  for (int32_t j = 0; j < in.features; ++j)
    for (int32_t r = whole; r < ((rows + kPad - 1) & ~(kPad - 1)); ++r)
      xt[static_cast<int64_t>(j) * block + r] = r < rows ? in.at(r, j) : 0.0f;
  return true;
}

inline bool transposed(const Tables&, const ByFeature<float>&, int32_t, int32_t, float*) { return false; }

// Rows [0, rows) of the features the forest reads into xt [F, block], zero-padded to a
// multiple of kPad (the others are never read).
template <typename In>
inline int32_t block_of(const Tables& f, const In& in, int32_t rows, int32_t block, float* xt) {
  const int32_t padded = (rows + kPad - 1) & ~(kPad - 1);
  if (transposed(f, in, rows, block, xt)) return padded;
  for (int64_t u = 0; u < f.n_used; ++u) {
    const int32_t j = f.used[u];
    float* col = xt + static_cast<int64_t>(j) * block;
    copy_feature(in, j, rows, col);
    for (int32_t r = rows; r < padded; ++r) col[r] = 0.0f;
  }
  return padded;
}

// Whether the block's features the forest reads hold a NaN: one pass over the block
// spares every level of every tree its missing-value test where none does (dense data:
// most batches of most tables).
inline bool holds_nan(const Tables& f, const Block8& b, int32_t padded) {
  __m256 any = _mm256_setzero_ps();
  for (int64_t u = 0; u < f.n_used; ++u) {
    const float* col = b.xt + (static_cast<int64_t>(f.used[u]) << b.log_block);
    for (int32_t r = 0; r < padded; r += 8) {
      __m256 v = _mm256_loadu_ps(col + r);
      any = _mm256_or_ps(any, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
  }
  return _mm256_movemask_ps(any) != 0;
}

template <typename A, bool Zero, bool Vec, typename In>
void score8(const Tables& f, const In& in, int64_t rows, A* out, const Options& o) {
  int32_t log_block = 0;
  while ((1 << log_block) < o.block) ++log_block;
  std::vector<float> xt(static_cast<size_t>(f.n_features) * o.block);
  const Block8 b{xt.data(), log_block, _mm256_set1_ps(static_cast<float>(f.zero))};
  int32_t node[kMaxBlock];
  for (int64_t start = 0; start < rows; start += o.block) {
    const int32_t n = static_cast<int32_t>(rows - start < o.block ? rows - start : o.block);
    const int32_t padded = block_of(f, in.after(start), n, o.block, xt.data());
    A* ob = out + start * f.n_outputs;
    const bool nan = holds_nan(f, b, padded);
    for (int64_t t = 0; t < f.n_trees; ++t) {
#if defined(__AVX512F__)
      if (o.wide && nan) walk16<Zero, true>(f, t, b, padded, o, node);
      else if (o.wide) walk16<Zero, false>(f, t, b, padded, o, node);
      else
#endif
      if (nan) walk8<Zero, true>(f, t, b, padded, o, node);
      else walk8<Zero, false>(f, t, b, padded, o, node);
      add_leaves<A, Vec>(f, t, node, n, ob);
    }
  }
}

}  // namespace

#define SCORING_WALK_AVX2 1
#endif  // __AVX2__

namespace {

template <typename A, bool Zero, bool Cat, typename In>
void by_leaves(const Tables& f, const In& in, int64_t rows, void* out, const Options& o) {
  auto* os = static_cast<A*>(out);
#ifdef SCORING_WALK_AVX2
  if constexpr (std::is_same_v<typename In::Value, float> && !Cat) {
    if (o.vector && rows <= o.few) {
      if (f.vector_leaves) score_by_trees<A, Zero, true>(f, in, rows, os);
      else score_by_trees<A, Zero, false>(f, in, rows, os);
      return;
    }
    if (o.vector) {
      if (f.vector_leaves) score8<A, Zero, true>(f, in, rows, os, o);
      else score8<A, Zero, false>(f, in, rows, os, o);
      return;
    }
  }
#endif
  if (f.vector_leaves) score<A, Zero, Cat, true>(f, in, rows, os, o.block);
  else score<A, Zero, Cat, false>(f, in, rows, os, o.block);
}

template <typename A, typename In>
void by_tests(const Tables& f, bool zero, bool cat, const In& in, int64_t rows, void* out,
              const Options& o) {
  if (zero && cat) by_leaves<A, true, true>(f, in, rows, out, o);
  else if (zero) by_leaves<A, true, false>(f, in, rows, out, o);
  else if (cat) by_leaves<A, false, true>(f, in, rows, out, o);
  else by_leaves<A, false, false>(f, in, rows, out, o);
}

// The input as float or double values (x64), summed as float or double (acc64):
// `make(values)` is the input for a null pointer of the values' type.
template <typename Make>
void by_types(const Tables& f, int32_t x64, int32_t acc64, bool zero, bool cat, Make make,
              int64_t rows, void* out, const Options& o) {
  const double* as64 = nullptr;
  const float* as32 = nullptr;
  if (x64 && acc64) by_tests<double>(f, zero, cat, make(as64), rows, out, o);
  else if (x64) by_tests<float>(f, zero, cat, make(as64), rows, out, o);
  else if (acc64) by_tests<double>(f, zero, cat, make(as32), rows, out, o);
  else by_tests<float>(f, zero, cat, make(as32), rows, out, o);
}

bool valid(int32_t block, int32_t uniform) {
  return block >= 16 && block <= kMaxBlock && !(block & (block - 1)) && uniform >= 0;
}

}  // namespace

extern "C" {

// Rows a vector of the AVX2 path holds; 0 where this build has none.
int32_t walk_vector_lanes() {
#ifdef SCORING_WALK_AVX2
  return 8;
#else
  return 0;
#endif
}

// Rows a vector of the top levels holds with wide = 1: 16 where the build has AVX-512,
// else 0 (wide = 1 then walks eight rows per vector).
int32_t walk_wide_lanes() {
#if defined(SCORING_WALK_AVX2) && defined(__AVX512F__)
  return 16;
#else
  return 0;
#endif
}

// 1 where this build packs the rows still walking into vectors (below = 2: AVX-512VL's
// compress); elsewhere below = 2 walks row by row.
int32_t walk_packs() {
#if defined(SCORING_WALK_AVX2) && defined(__AVX512VL__)
  return 1;
#else
  return 0;
#endif
}

// Adds every tree's leaf to out[rows, n_outputs]; x is [rows, n_features] row-major.
// x64 / acc64: double inputs / accumulation; zero, cat: the forest has zero-as-missing
// or categorical nodes.  Returns 0, or -1 for options out of range.
int32_t walk_score(const Tables* f, int32_t x64, int32_t acc64, int32_t zero, int32_t cat,
                   const void* x, int64_t rows, void* out, int32_t block, int32_t uniform,
                   int32_t vector, int32_t below, int32_t few, int32_t wide) {
  if (!valid(block, uniform)) return -1;
  auto make = [&](auto typed) {
    using X = std::remove_const_t<std::remove_pointer_t<decltype(typed)>>;
    return RowMajor<X>{static_cast<const X*>(x), f->n_features};
  };
  by_types(*f, x64, acc64, zero, cat, make, rows, out,
           Options{block, uniform, vector, below, few, wide});
  return 0;
}

// Each row's leaf per tree as the framework numbers it: ids[rows, n_trees] from
// native_id[nodes]; x is [rows, n_features] row-major, doubles where x64.  The scalar
// walk: the same tests as walk_score's every path.
int32_t walk_leaf_ids(const Tables* f, int32_t x64, int32_t zero, int32_t cat, const void* x,
                      int64_t rows, const int32_t* native_id, int32_t* ids) {
  auto run = [&](auto typed) {
    using X = std::remove_const_t<std::remove_pointer_t<decltype(typed)>>;
    const RowMajor<X> in{static_cast<const X*>(x), f->n_features};
    if (zero && cat) leaves<true, true>(*f, in, rows, native_id, ids);
    else if (zero) leaves<true, false>(*f, in, rows, native_id, ids);
    else if (cat) leaves<false, true>(*f, in, rows, native_id, ids);
    else leaves<false, false>(*f, in, rows, native_id, ids);
  };
  if (x64) run(static_cast<const double*>(nullptr));
  else run(static_cast<const float*>(nullptr));
  return 0;
}

// walk_score over rows [first, first + rows) of one array per feature: columns[j] is
// feature j's values (x64: doubles), each contiguous.
int32_t walk_score_columns(const Tables* f, int32_t x64, int32_t acc64, int32_t zero, int32_t cat,
                           const void* const* columns, int64_t first, int64_t rows, void* out,
                           int32_t block, int32_t uniform, int32_t vector, int32_t below,
                           int32_t few, int32_t wide) {
  if (!valid(block, uniform)) return -1;
  auto make = [&](auto typed) {
    using X = std::remove_const_t<std::remove_pointer_t<decltype(typed)>>;
    return ByFeature<X>{reinterpret_cast<const X* const*>(columns), first};
  };
  by_types(*f, x64, acc64, zero, cat, make, rows, out,
           Options{block, uniform, vector, below, few, wide});
  return 0;
}

}  // extern "C"
