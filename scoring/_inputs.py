"""Rows to score (numpy, pandas, pyarrow, torch) -> one float matrix in model feature order.

Named inputs are matched by feature name when the model recorded names; categorical
columns are mapped with the model's own categories (unknown -> missing); nulls become
NaN.  Values the native predictor refuses (NaN, inf) are refused here with the column
and count, rather than scored silently.

An Arrow batch can also come out feature-major (:class:`Columns`, ``prepare(...,
columns=True)``): one array per feature, each the column's own buffer where it already
is one, for a kernel that reads features column by column; nothing is transposed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, overload

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import torch

from ._ir import Forest
from ._labels import encode_labels
from .errors import (
    FeatureCountError,
    InputError,
    InvalidValueError,
    MissingColumnError,
    NonNumericColumnError,
)

__all__ = [
    "Columns", "Matrix", "prepare", "prepare_key", "feature_names", "model_columns",
    "named_columns", "select_columns",
]  # fmt: skip

_AUTO_NAME = re.compile(r"^(Column_|f)\d+$")  # names frameworks invent for unnamed data
_FLOAT32_MAX = float(np.finfo(np.float32).max)

Matrix = np.ndarray | torch.Tensor


class Columns:
    """A batch's validated features feature-major: one contiguous 1-D array per feature in
    the model's order, all of one dtype.  Each is the input column's own buffer where
    it already is one (floats of that dtype, no nulls, no value rewritten), so nothing
    is copied, let alone transposed: walk.cpp reads the arrays through a pointer each,
    and a device copy takes them as one ``[features, rows]`` block (:meth:`into`).
    :meth:`rows` is the row-major matrix for everything else.  The arrays are read,
    never written (they may be the input's)."""

    def __init__(self, arrays: Sequence[np.ndarray]):
        if not arrays:
            raise ValueError("a batch of columns needs at least one feature")
        self.arrays = tuple(arrays)
        self.dtype = self.arrays[0].dtype

    def __len__(self) -> int:
        return len(self.arrays[0])

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, features)``, as a matrix's."""
        return len(self), len(self.arrays)

    def __getitem__(self, rows: slice) -> Columns:
        """Rows ``rows`` of every feature (views)."""
        return Columns([a[rows] for a in self.arrays])

    def rows(self) -> np.ndarray:
        """The row-major matrix ``[rows, features]`` (a transposing copy)."""
        return _row_major(list(self.arrays), self.dtype.type)

    def into(self, out: np.ndarray) -> None:
        """Copy into ``out[features, rows]`` (a pinned block for a device, say)."""
        for j, array in enumerate(self.arrays):
            out[j] = array

    def narrowed(self) -> Columns:
        """Float64 columns whose values are all float32 values, as float32 (a float32
        column read as double): see :func:`scoring._compiler.generic.narrowed`."""
        if self.dtype != np.float64:
            return self
        narrow = [a.astype(np.float32) for a in self.arrays]
        same = all(np.array_equal(n, a, equal_nan=True)
                   for n, a in zip(narrow, self.arrays, strict=True))  # fmt: skip
        return Columns(narrow) if same else self


def feature_names(forest: Forest) -> list[str] | None:
    """The model's real feature names, or None when it was trained on unnamed data."""
    names = forest.feature_names
    if not names or all(_AUTO_NAME.match(n) for n in names):
        return None
    return names


@overload
def prepare(X: Any, forest: Forest, *, leaves: bool = False,
            columns: Literal[False] = False) -> Matrix: ...  # fmt: skip
@overload
def prepare(X: Any, forest: Forest, *, leaves: bool = False,
            columns: bool) -> Matrix | Columns: ...  # fmt: skip
def prepare(X: Any, forest: Forest, *, leaves: bool = False,
            columns: bool = False) -> Matrix | Columns:  # fmt: skip
    """Validated float matrix ``[rows, n_features]``: numpy, or torch for torch input.

    ``leaves``: for leaf ids, which some native predictors take through a stricter reader.
    ``columns``: an Arrow batch or a pandas frame as :class:`Columns` (feature-major,
    not copied where it need not be); any other input as a matrix.
    """
    if columns and isinstance(X, (pa.Table, pa.RecordBatch, pd.DataFrame)):
        named = _pandas_columns(X, forest) if isinstance(X, pd.DataFrame) else (
            _arrow_columns(X, forest))  # fmt: skip
        cols = _as_columns(named, forest)
        _check_values(cols, forest, X, leaves=leaves)
        return cols
    if isinstance(X, torch.Tensor):
        mat: Matrix = _from_torch(X, forest)
    elif isinstance(X, pd.DataFrame):
        mat = _from_columns(_pandas_columns(X, forest), forest)
    elif isinstance(X, (pa.Table, pa.RecordBatch)):
        mat = _from_columns(_arrow_columns(X, forest), forest)
    else:
        mat = _from_numpy(X, forest)
    if forest.missing_value is not None:
        mat[mat == forest.missing_value] = float("nan")
    for j, fill in forest.fill_missing.items():  # a Pipeline's SimpleImputer
        column = mat[:, j]
        column[_isnan(column)] = fill
    _check_values(mat, forest, X, leaves=leaves)
    return mat


def prepare_key(forest: Forest) -> str:
    """Equal for two forests whose :func:`prepare` reads and checks the same input the
    same way (every field of the Forest it reads), so one matrix can serve both."""
    read = (
        forest.feature_names, forest.n_features, forest.input_dtype, forest.missing_value,
        sorted(forest.fill_missing.items()), forest.categorical_features, forest.categories,
        forest.recode_categories, forest.reject_unknown_categories, forest.encoded,
        sorted(forest.refuses.items()), forest.dropped,
    )  # fmt: skip
    return repr(read)


def _input_labels(X: Any, forest: Forest) -> list[str]:
    """What to call feature j in errors: the model's name, else the input's column."""
    if feature_names(forest) is None and isinstance(X, pd.DataFrame):
        return [str(c) for c in X.columns]
    if feature_names(forest) is None and isinstance(X, (pa.Table, pa.RecordBatch)):
        return list(X.schema.names)
    return _labels(forest)


def _labels(forest: Forest) -> list[str]:
    return feature_names(forest) or [f"column {i}" for i in range(forest.n_features)]


def _check_count(n_columns: int, forest: Forest) -> None:
    if n_columns != forest.n_features:
        raise FeatureCountError(
            f"input has {n_columns} feature columns but {forest.described} was trained on "
            f"{forest.n_features}"
        )


def select_columns(columns: Sequence[str], forest: Forest) -> list[int | str]:
    """The input columns holding the model's features: by name (:func:`named_columns`),
    else every column by position, as the frameworks read an in-memory frame (batch
    scoring never does: see :class:`~scoring._scorer.Scorer`)."""
    named = named_columns(columns, forest)
    if named is not None:
        return list(named)
    _check_count(len(columns), forest)
    return list(range(len(columns)))


def model_columns(X: Any, forest: Forest) -> Any:
    """A frame or Arrow table cut to the model's features in the model's order, matched
    by name as :func:`prepare` matches them (extra columns dropped, any order), for a
    native predictor that would read it by position or refuse it; anything else as it is."""
    if isinstance(X, (pa.Table, pa.RecordBatch)):
        keys = select_columns(X.schema.names, forest)
        return X.select(keys) if all(isinstance(k, str) for k in keys) else X
    if isinstance(X, pd.DataFrame):
        keys = select_columns([str(c) for c in X.columns], forest)
        if all(isinstance(k, str) for k in keys):
            by_name = {str(c): c for c in X.columns}
            return X.loc[:, [by_name[str(k)] for k in keys]]
    return X


def named_columns(columns: Sequence[str], forest: Forest) -> list[str] | None:
    """The model's features by name, or None when the input must be read by position.

    By name whenever the model has real names, or the input holds any of the names a
    framework gave the model's unnamed features (``f0..fN``, ``Column_N``): such columns
    in another order are then read by name, never by position, and one of them missing
    is named.  A model without names reads ``f0..fN`` (or ``Column_0..N``) by name too.
    """
    names = forest.feature_names or []
    present = set(columns)
    if feature_names(forest) is None and not present & set(names):
        n = forest.n_features
        generic = ([f"{p}{i}" for i in range(n)] for p in ("f", "Column_"))
        return next((g for g in generic if present >= set(g)), None)
    missing = [n for n in names if n not in present]
    if missing:
        shown = ", ".join(repr(m) for m in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise MissingColumnError(
            f"input is missing feature column(s) {shown}{more} that {forest.described} needs"
        )
    return list(names)


# -- numpy and torch ------------------------------------------------------------------


def _from_numpy(X: Any, forest: Forest) -> np.ndarray:
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise InputError(f"expected a 2-D array of rows, got {arr.ndim} dimension(s)")
    _check_count(arr.shape[1], forest)
    # Labels read column by column: a Pipeline's encoder's, or categories given as text
    # in an object array.
    if forest.encoded or (forest.recode_categories and arr.dtype.kind == "O"):
        columns = [_values_as_float(arr[:, j], j, forest) for j in range(arr.shape[1])]
        return _from_columns(columns, forest)
    if arr.dtype.kind not in "fiub":
        for j in range(arr.shape[1]):
            _column_as_float(arr[:, j], j, forest)  # raises naming the first bad column
    target = _target_dtype([arr.dtype], forest)
    # The caller's array as it is where nothing in it is rewritten (2,000 features:
    # a copy of 50,000 rows is 400 MB); a copy where a value changes, never in place.
    rewrites = (forest.missing_value is not None or bool(forest.fill_missing)
                or (forest.recode_categories and bool(forest.categories)))  # fmt: skip
    with np.errstate(over="ignore"):  # past float32's range is inf, as native reads it
        out: np.ndarray = arr.astype(target, copy=rewrites)
    for j in forest.categories if forest.recode_categories else ():
        out[:, j] = _maybe_recode(arr[:, j], j, forest)
    return out


def _from_torch(X: torch.Tensor, forest: Forest) -> torch.Tensor:
    if X.ndim != 2:
        raise InputError(f"expected a 2-D tensor of rows, got {X.ndim} dimension(s)")
    _check_count(X.shape[1], forest)
    keep64 = X.dtype == torch.float64 and forest.input_dtype == "float64"
    out = X.to(torch.float64 if keep64 else torch.float32).clone()
    if (forest.recode_categories and forest.categories) or forest.encoded:
        host = out.cpu().numpy()
        for j in forest.categories:
            host[:, j] = _values_as_float(host[:, j], j, forest)
        out = torch.from_numpy(host).to(X.device)
    return out


# -- named columns (pandas, pyarrow) ----------------------------------------------------


def _pandas_columns(df: pd.DataFrame, forest: Forest) -> list[np.ndarray]:
    keys = select_columns([str(c) for c in df.columns], forest)
    by_name = {str(c): c for c in df.columns}
    cols = []
    for j, key in enumerate(keys):
        series = df[by_name[key]] if isinstance(key, str) else df.iloc[:, key]
        cols.append(_series_as_float(series, j, forest))
    return cols


def _series_as_float(series: pd.Series, j: int, forest: Forest) -> np.ndarray:
    if j in forest.encoded:  # labels as they are: NaN and None apart, as the encoder reads
        values = series.to_numpy() if series.dtype.kind in "fiub" else series.to_numpy(object)
        return _values_as_float(values, j, forest)
    if isinstance(series.dtype, pd.CategoricalDtype):
        labels = forest.categories.get(j)
        if labels is not None and forest.reject_unknown_categories:
            _refuse_unknown(series.dropna().unique(), labels, j, forest)
        if labels is not None:
            series = series.cat.set_categories(labels)
        codes = series.cat.codes.to_numpy().astype(np.float64)
        codes[codes < 0] = np.nan  # missing and unseen categories
        return codes
    if series.dtype.kind in "fiub":
        return _maybe_recode(series.to_numpy(), j, forest)
    try:
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError):
        return _column_as_float(series.to_numpy(dtype=object), j, forest)
    return _maybe_recode(values, j, forest)


def _arrow_columns(table: pa.Table | pa.RecordBatch, forest: Forest) -> list[np.ndarray]:
    keys = select_columns(table.schema.names, forest)
    cols = []
    for j, key in enumerate(keys):
        col = table.column(key)
        if isinstance(col, pa.ChunkedArray):  # one chunk, the usual case: its buffers as they are
            col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
        if j in forest.encoded:  # labels as pandas gives them: nulls None (text), NaN
            plain = col.dictionary_decode() if pa.types.is_dictionary(col.type) else col
            cols.append(_values_as_float(plain.to_numpy(zero_copy_only=False), j, forest))
            continue
        if pa.types.is_dictionary(col.type) and j in forest.categories:
            cols.append(_series_as_float(pd.Series(col.to_pandas()), j, forest))
            continue  # labels -> the model's codes, as for pandas categories
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            cols.append(_column_as_float(col.to_numpy(zero_copy_only=False), j, forest))
            continue
        cols.append(_maybe_recode(_arrow_floats(col, j, forest), j, forest))
    return cols


def _arrow_floats(col: pa.Array, j: int, forest: Forest) -> np.ndarray:
    """A numeric Arrow column as floats, nulls as NaN: a float column without nulls is
    its own buffer (no copy); a cast or a null fill only where the column needs one."""
    try:
        if not pa.types.is_floating(col.type) or pa.types.is_float16(col.type):
            col = pc.cast(col, pa.float64())
        if col.null_count:
            col = col.fill_null(float("nan"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _non_numeric(j, str(col.type), forest) from None
    return col.to_numpy(zero_copy_only=False)


#: Rows per block of the transposing copy: a block's columns stay in cache while its
#: rows are written (measured fastest at 4,096 rows of 28 features; a strided copy per
#: column, ``np.column_stack``, is 4-5x slower).
_BLOCK_ROWS = 4096


def _from_columns(cols: list[np.ndarray], forest: Forest) -> np.ndarray:
    """Row-major ``[rows, features]``, written once from the columns, block by block."""
    if not cols:
        raise FeatureCountError(f"input has no feature columns; {forest.described} needs some")
    return _row_major(cols, _target_dtype([c.dtype for c in cols], forest))


def _row_major(cols: list[np.ndarray], target: type) -> np.ndarray:
    rows = len(cols[0])
    out: np.ndarray = np.empty((rows, len(cols)), dtype=target)
    block: np.ndarray = np.empty((len(cols), min(rows, _BLOCK_ROWS)), dtype=target)
    with np.errstate(over="ignore"):  # past float32's range is inf, as native reads it
        for start in range(0, rows, _BLOCK_ROWS):
            part = block[:, : min(_BLOCK_ROWS, rows - start)]
            np.stack([c[start : start + _BLOCK_ROWS] for c in cols], out=part, casting="unsafe")
            out[start : start + part.shape[1]] = part.T
    return out


def _as_columns(cols: list[np.ndarray], forest: Forest) -> Columns:
    """The columns at the matrix's dtype, contiguous, with the model's missing value and
    an imputer's fills applied as :func:`prepare` applies them to a matrix; a column is
    copied only where one of those changes it (never written in place: it may be the
    input's own buffer)."""
    if not cols:
        raise FeatureCountError(f"input has no feature columns; {forest.described} needs some")
    target = _target_dtype([c.dtype for c in cols], forest)
    out = []
    with np.errstate(over="ignore"):  # past float32's range is inf, as native reads it
        for j, col in enumerate(cols):
            col = np.ascontiguousarray(col, dtype=target)
            missing = forest.missing_value
            if missing is not None and (col == missing).any():
                col = np.where(col == missing, target(np.nan), col)
            fill = forest.fill_missing.get(j)
            if fill is not None and np.isnan(col).any():
                col = np.where(np.isnan(col), target(fill), col)
            out.append(col)
    return Columns(out)


def _values_as_float(values: np.ndarray, j: int, forest: Forest) -> np.ndarray:
    """One column of any dtype: an encoder's labels, else numbers or category labels."""
    if j in forest.encoded:
        return encode_labels(values, j, forest, _labels(forest)[j])
    if values.dtype.kind in "fiub":
        return _maybe_recode(values, j, forest)
    return _column_as_float(values, j, forest)


def _column_as_float(values: np.ndarray, j: int, forest: Forest) -> np.ndarray:
    """Object/string column: category labels of a categorical feature, else numbers."""
    labels = forest.categories.get(j)
    if labels is not None:
        if forest.reject_unknown_categories:
            _refuse_unknown(pd.unique(values[pd.notna(values)]), labels, j, forest)
        index = {label: code for code, label in enumerate(labels)}
        return np.array([index.get(v, np.nan) for v in values], dtype=np.float64)
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise _non_numeric(j, str(values.dtype), forest) from None


def _refuse_unknown(values: Any, labels: list[object], j: int, forest: Forest) -> None:
    known = set(labels)
    unknown = [v for v in values if v not in known]
    if unknown:
        raise InputError(
            f"feature column {_labels(forest)[j]!r} holds categories {unknown[:5]!r} that "
            f"{forest.described} never saw in training (it refuses them, as XGBoost does)"
        )


def _non_numeric(j: int, dtype: str, forest: Forest) -> NonNumericColumnError:
    return NonNumericColumnError(
        f"feature column {_labels(forest)[j]!r} has non-numeric type {dtype}; "
        f"{forest.described} needs numbers (or categories it was trained with)"
    )


def _maybe_recode(values: np.ndarray, j: int, forest: Forest) -> np.ndarray:
    if forest.recode_categories and j in forest.categories:
        labels = forest.categories[j]
        if any(not isinstance(v, (int, float)) for v in labels) and len(values):
            # scikit-learn's encoder compares numbers with text labels and fails (a
            # TypeError from isnan): refused as it refuses them, with the fix.
            raise NonNumericColumnError(
                f"feature column {_labels(forest)[j]!r} is categorical with text labels "
                f"({', '.join(map(repr, labels[:3]))}, ...), and it holds numbers, which "
                f"{forest.described} refuses; pass its labels (text or a pandas Categorical)"
            )
        return _recode_numeric(values.astype(np.float64), labels)
    return values


def _recode_numeric(values: np.ndarray, labels: list[object]) -> np.ndarray:
    """Raw category values -> codes by exact match, unknown -> NaN (HGB's encoder);
    +-inf stays, for the check of what native refuses."""
    index = {float(v): code for code, v in enumerate(labels) if isinstance(v, (int, float))}
    return np.array(
        [index.get(float(v), v if np.isinf(v) else np.nan) for v in values], dtype=np.float64
    )


def _target_dtype(dtypes: Sequence[np.dtype], forest: Forest) -> type:
    """float32 when the native predictor reads float32 or the input is all float32."""
    if forest.input_dtype == "float32" or all(d == np.float32 for d in dtypes):
        return np.float32
    return np.float64


# -- the values the native predictor refuses -----------------------------------------


def _check_values(mat: Matrix | Columns, forest: Forest, X: Any, *, leaves: bool) -> None:
    """Raises naming the first column of ``mat`` (read from ``X``) holding a value native
    refuses; the columns' labels are made only then (a one-row call would spend more on
    them than on its walk)."""
    for what, counts, reason in _refusals(mat, forest, leaves=leaves):
        if counts is None:  # the common case: one pass, no per-column counts
            continue
        cols = [j for j in range(forest.n_features) if int(counts[j]) > 0]
        j = cols[0]
        raise InvalidValueError(
            f"feature column {_input_labels(X, forest)[j]!r} has {int(counts[j])} {what} value(s) "
            f"({len(cols)} column(s) affected), which {forest.described} refuses "
            f"({reason}): clean or impute them before scoring"
        )


Counts = np.ndarray | None


def _refusals(mat: Matrix | Columns, forest: Forest, *, leaves: bool
              ) -> Iterator[tuple[str, Counts, str]]:  # fmt: skip
    """(what, bad cells per feature or None for none, native's reason) for each kind of
    value native refuses here."""
    refuses = {
        kind.removeprefix("leaf_"): reason
        for kind, reason in forest.refuses.items()
        if kind.startswith("leaf_") == leaves
    }
    if not refuses:
        return
    groups = forest.column_groups()
    if "nan" in refuses:
        read = [j for cols in groups.values() for j in cols]  # a dropped column: anything
        yield "NaN (missing)", _within(_counts(mat, _isnan), read), refuses["nan"]
    too_large: list[Counts] = []  # one pass over the matrix, for whichever groups need it
    for group, cols in groups.items():
        if f"{group}inf" in refuses and cols:
            if not too_large:
                too_large.append(_counts(mat, lambda m: _too_large(m, forest)))
            yield "infinite or too large", _within(too_large[0], cols), refuses[f"{group}inf"]


def _counts(mat: Matrix | Columns, test: Callable[[Any], Any]) -> Counts:
    """Cells per feature where ``test`` holds, or None where it holds for none."""
    if isinstance(mat, Columns):
        counts = np.array([np.count_nonzero(test(a)) for a in mat.arrays])
        return counts if counts.any() else None
    bad = test(mat)
    if not bool(bad.any()):
        return None
    summed = bad.sum(0)
    return summed.cpu().numpy() if isinstance(summed, torch.Tensor) else summed


def _within(counts: Counts, cols: list[int]) -> Counts:
    """``counts`` in columns ``cols`` only (None where those have none)."""
    if counts is None or len(cols) == len(counts):
        return counts
    kept = np.zeros_like(counts)
    kept[cols] = counts[cols]
    return kept if kept.any() else None


def _too_large(mat: Matrix, forest: Forest) -> Any:
    """inf, and for float32 readers the finite float64 values past float32's range (they
    would become inf); a float32 matrix holds none of those."""
    single = torch.float32 if isinstance(mat, torch.Tensor) else np.float32
    if forest.input_dtype != "float32" or mat.dtype == single:
        return _isinf(mat)
    return _absolute(mat) > _FLOAT32_MAX


def _isnan(mat: Matrix) -> Any:
    return torch.isnan(mat) if isinstance(mat, torch.Tensor) else np.isnan(mat)


def _isinf(mat: Matrix) -> Any:
    return torch.isinf(mat) if isinstance(mat, torch.Tensor) else np.isinf(mat)


def _absolute(mat: Matrix) -> Any:
    return mat.abs() if isinstance(mat, torch.Tensor) else np.abs(mat)
