/*
 * spyrejax.dma._transpose: the host DMA engine's copy kernels.
 *
 * A descriptor whose stick runs down a host column (a "transposed-stick" layout) is an
 * element transpose: the source is contiguous along one loop, the destination along
 * another. NumPy copies that one element at a time (about 1 ns per element) and XLA's
 * CPU transpose is little better; transpose() moves square tiles through SIMD registers
 * (SSE2 unpacks on x86-64, plain loops elsewhere), so a transposed transfer runs at a
 * good fraction of memcpy speed.
 *
 * Every other large descriptor moves contiguous runs (whole sticks, or a partial last
 * one): copy_runs() walks its loops in the order given (the engine passes them
 * source-sequential) and copies each run, with non-temporal stores when asked. Such a
 * transfer writes one stream per device tile (or host row), and every page of a fresh
 * destination has been faulted, so zeroed by the kernel and written back, long before
 * its last run arrives: ordinary stores would read each line back for ownership,
 * streaming stores write it once.
 *
 * Both take (dst, dst_offset, dst_strides, src, src_offset, src_strides, shape, width):
 * the strided views of src and dst of the given shape, strides and offsets in bytes,
 * width the element width (transpose) or run length (copy_runs). The views are
 * bounds-checked against the buffers before anything is written; the copy runs without
 * the GIL. The buffers must not overlap (DMA always copies between distinct host and
 * device memory).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define SPYRE_SSE2 1
#else
#define SPYRE_SSE2 0
#endif

#define MAX_DIMS 32
#define SWEEP_BYTES (256 * 1024)
#define INLINE static inline __attribute__((always_inline))

/* Tile edge in elements for each element width: one 16-byte register per tile row. */
INLINE Py_ssize_t tile_of(Py_ssize_t item) { return item == 1 ? 16 : 16 / item; }

/* dst[i][j] = src[j][i] for i < rows, j < cols (one scalar element at a time). */
static void edge_copy(char *dst, Py_ssize_t ds, const char *src, Py_ssize_t ss,
                      Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t item) {
    for (Py_ssize_t i = 0; i < rows; i++)
        for (Py_ssize_t j = 0; j < cols; j++)
            memcpy(dst + i * ds + j * item, src + j * ss + i * item, (size_t)item);
}

#if SPYRE_SSE2
#define LD(p) _mm_loadu_si128((const __m128i *)(p))
#define ST(p, v) _mm_storeu_si128((__m128i *)(p), (v))
/* A non-temporal 16-byte store (to memory, no read for ownership): p 16-byte aligned. */
#define ST_NT(p, v) _mm_stream_si128((__m128i *)(p), (v))

INLINE void tile_8(char *d, Py_ssize_t ds, const char *s, Py_ssize_t ss) {
    __m128i r0 = LD(s), r1 = LD(s + ss);
    ST(d, _mm_unpacklo_epi64(r0, r1));
    ST(d + ds, _mm_unpackhi_epi64(r0, r1));
}

INLINE void tile_4(char *d, Py_ssize_t ds, const char *s, Py_ssize_t ss) {
    __m128i r0 = LD(s), r1 = LD(s + ss), r2 = LD(s + 2 * ss), r3 = LD(s + 3 * ss);
    __m128i a0 = _mm_unpacklo_epi32(r0, r1), a1 = _mm_unpackhi_epi32(r0, r1);
    __m128i a2 = _mm_unpacklo_epi32(r2, r3), a3 = _mm_unpackhi_epi32(r2, r3);
    ST(d, _mm_unpacklo_epi64(a0, a2));
    ST(d + ds, _mm_unpackhi_epi64(a0, a2));
    ST(d + 2 * ds, _mm_unpacklo_epi64(a1, a3));
    ST(d + 3 * ds, _mm_unpackhi_epi64(a1, a3));
}

INLINE void tile_2(char *d, Py_ssize_t ds, const char *s, Py_ssize_t ss) {
    __m128i r0 = LD(s), r1 = LD(s + ss), r2 = LD(s + 2 * ss), r3 = LD(s + 3 * ss);
    __m128i r4 = LD(s + 4 * ss), r5 = LD(s + 5 * ss), r6 = LD(s + 6 * ss), r7 = LD(s + 7 * ss);
    __m128i a0 = _mm_unpacklo_epi16(r0, r1), a1 = _mm_unpackhi_epi16(r0, r1);
    __m128i a2 = _mm_unpacklo_epi16(r2, r3), a3 = _mm_unpackhi_epi16(r2, r3);
    __m128i a4 = _mm_unpacklo_epi16(r4, r5), a5 = _mm_unpackhi_epi16(r4, r5);
    __m128i a6 = _mm_unpacklo_epi16(r6, r7), a7 = _mm_unpackhi_epi16(r6, r7);
    __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
    __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
    __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
    __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
    ST(d, _mm_unpacklo_epi64(b0, b4));
    ST(d + ds, _mm_unpackhi_epi64(b0, b4));
    ST(d + 2 * ds, _mm_unpacklo_epi64(b1, b5));
    ST(d + 3 * ds, _mm_unpackhi_epi64(b1, b5));
    ST(d + 4 * ds, _mm_unpacklo_epi64(b2, b6));
    ST(d + 5 * ds, _mm_unpackhi_epi64(b2, b6));
    ST(d + 6 * ds, _mm_unpacklo_epi64(b3, b7));
    ST(d + 7 * ds, _mm_unpackhi_epi64(b3, b7));
}

/* 16x16 bytes: two 8x8 byte transposes per half, built from 8-byte loads. */
INLINE void tile_1x8(char *d, Py_ssize_t ds, const char *s, Py_ssize_t ss) {
    __m128i r[8];
    for (int k = 0; k < 8; k++) r[k] = _mm_loadl_epi64((const __m128i *)(s + k * ss));
    __m128i a0 = _mm_unpacklo_epi8(r[0], r[1]), a1 = _mm_unpacklo_epi8(r[2], r[3]);
    __m128i a2 = _mm_unpacklo_epi8(r[4], r[5]), a3 = _mm_unpacklo_epi8(r[6], r[7]);
    __m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1);
    __m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3);
    __m128i c0 = _mm_unpacklo_epi32(b0, b2), c1 = _mm_unpackhi_epi32(b0, b2);
    __m128i c2 = _mm_unpacklo_epi32(b1, b3), c3 = _mm_unpackhi_epi32(b1, b3);
    _mm_storel_epi64((__m128i *)d, c0);
    _mm_storel_epi64((__m128i *)(d + ds), _mm_srli_si128(c0, 8));
    _mm_storel_epi64((__m128i *)(d + 2 * ds), c1);
    _mm_storel_epi64((__m128i *)(d + 3 * ds), _mm_srli_si128(c1, 8));
    _mm_storel_epi64((__m128i *)(d + 4 * ds), c2);
    _mm_storel_epi64((__m128i *)(d + 5 * ds), _mm_srli_si128(c2, 8));
    _mm_storel_epi64((__m128i *)(d + 6 * ds), c3);
    _mm_storel_epi64((__m128i *)(d + 7 * ds), _mm_srli_si128(c3, 8));
}

INLINE void tile_1(char *d, Py_ssize_t ds, const char *s, Py_ssize_t ss) {
    tile_1x8(d, ds, s, ss);
    tile_1x8(d + 8, ds, s + 8 * ss, ss);
    tile_1x8(d + 8 * ds, ds, s + 8, ss);
    tile_1x8(d + 8 * ds + 8, ds, s + 8 * ss + 8, ss);
}
#endif

/* One square tile: dst[i][j] = src[j][i] for i, j < tile_of(item). */
INLINE void tile(char *d, Py_ssize_t ds, const char *s, Py_ssize_t ss, Py_ssize_t item) {
#if SPYRE_SSE2
    switch (item) {
    case 1: tile_1(d, ds, s, ss); return;
    case 2: tile_2(d, ds, s, ss); return;
    case 4: tile_4(d, ds, s, ss); return;
    case 8: tile_8(d, ds, s, ss); return;
    }
#endif
    Py_ssize_t t = tile_of(item);
    edge_copy(d, ds, s, ss, t, t, item);
}

/* Packed rows (stride bytes apart) per sweep chunk: a whole number of tiles, at least one. */
INLINE Py_ssize_t sweep_chunk(Py_ssize_t stride, Py_ssize_t t) {
    Py_ssize_t chunk = stride > 0 ? SWEEP_BYTES / stride / t * t : 0;
    return chunk < t ? t : chunk;
}

/*
 * dst[i][j] = src[j][i] for i < n_rows, j < n_cols: dst rows (stride ds) are contiguous
 * along j, src rows (stride ss) along i.
 *
 * One side's rows are far apart (a host row: 8 KiB for 4096 float16 columns), the other's
 * packed (device sticks, 128 bytes apart). The outer loop steps through the far side one
 * tile (t rows) at a time, so it reads or writes only t sequential streams, which the
 * prefetcher follows; the inner loop sweeps the packed side, whose lines each tile fills
 * 16 bytes at a time and the next t-row step revisits. Sweeps are cut into chunks of
 * SWEEP_BYTES of packed rows so the lines being revisited stay in L2.
 */
INLINE void transpose_2d(char *dst, Py_ssize_t ds, const char *src, Py_ssize_t ss,
                         Py_ssize_t n_rows, Py_ssize_t n_cols, Py_ssize_t item) {
    Py_ssize_t t = tile_of(item);
    Py_ssize_t full_rows = n_rows - n_rows % t, full_cols = n_cols - n_cols % t;
    if (ds >= ss) { /* dst rows far apart: t of them at a time, sweeping j */
        Py_ssize_t chunk = sweep_chunk(ss, t);
        for (Py_ssize_t j0 = 0; j0 < full_cols; j0 += chunk) {
            Py_ssize_t j1 = j0 + chunk < full_cols ? j0 + chunk : full_cols;
            for (Py_ssize_t i = 0; i < full_rows; i += t)
                for (Py_ssize_t j = j0; j < j1; j += t)
                    tile(dst + i * ds + j * item, ds, src + j * ss + i * item, ss, item);
        }
    } else { /* src rows far apart: t of them at a time, sweeping i */
        Py_ssize_t chunk = sweep_chunk(ds, t);
        for (Py_ssize_t i0 = 0; i0 < full_rows; i0 += chunk) {
            Py_ssize_t i1 = i0 + chunk < full_rows ? i0 + chunk : full_rows;
            for (Py_ssize_t j = 0; j < full_cols; j += t)
                for (Py_ssize_t i = i0; i < i1; i += t)
                    tile(dst + i * ds + j * item, ds, src + j * ss + i * item, ss, item);
        }
    }
    if (full_cols < n_cols)
        edge_copy(dst + full_cols * item, ds, src + full_cols * ss, ss, full_rows,
                  n_cols - full_cols, item);
    if (full_rows < n_rows)
        edge_copy(dst + full_rows * ds, ds, src + full_rows * item, ss, n_rows - full_rows,
                  n_cols, item);
}

static int read_ints(PyObject *seq, Py_ssize_t *out, Py_ssize_t n, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd entries, got %zd", what, n,
                     PySequence_Fast_GET_SIZE(fast));
        Py_DECREF(fast);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        out[k] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, k));
        if (out[k] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

/* transpose_2d compiled once per element width, so each tile's width is a constant. */
static void transpose_2d_any(char *dst, Py_ssize_t ds, const char *src, Py_ssize_t ss,
                             Py_ssize_t n_rows, Py_ssize_t n_cols, Py_ssize_t item) {
    switch (item) {
    case 1: transpose_2d(dst, ds, src, ss, n_rows, n_cols, 1); return;
    case 2: transpose_2d(dst, ds, src, ss, n_rows, n_cols, 2); return;
    case 4: transpose_2d(dst, ds, src, ss, n_rows, n_cols, 4); return;
    default: transpose_2d(dst, ds, src, ss, n_rows, n_cols, 8); return;
    }
}

/* 0 if the view (offset, strides over shape, item-wide elements) lies inside len bytes,
 * else -1 with a ValueError naming the view. Sizes are positive here; a size-1 dim's
 * stride is never used, the others must be non-negative. */
static int check_view(const char *name, Py_ssize_t len, Py_ssize_t offset,
                      const Py_ssize_t *strides, const Py_ssize_t *shape, Py_ssize_t ndim,
                      Py_ssize_t item) {
    Py_ssize_t last = offset;
    for (Py_ssize_t k = 0; offset >= 0 && k < ndim; k++) {
        if (shape[k] == 1) continue;
        if (strides[k] < 0) {
            PyErr_Format(PyExc_ValueError, "transpose: %s stride %zd of dim %zd is negative",
                         name, strides[k], k);
            return -1;
        }
        if (strides[k] > (PY_SSIZE_T_MAX - last) / shape[k]) {
            PyErr_Format(PyExc_ValueError, "transpose: the %s view overflows", name);
            return -1;
        }
        last += (shape[k] - 1) * strides[k];
    }
    if (offset < 0 || last > len - item) {
        PyErr_Format(PyExc_ValueError,
                     "transpose: the %s view spans bytes %zd..%zd, outside its %zd-byte buffer",
                     name, offset, last + item - 1, len);
        return -1;
    }
    return 0;
}

/* The innermost dim of size > 1 with the given stride, or -1. */
static Py_ssize_t contiguous_dim(const Py_ssize_t *strides, const Py_ssize_t *shape,
                                 Py_ssize_t ndim, Py_ssize_t item, Py_ssize_t skip) {
    for (Py_ssize_t k = ndim - 1; k >= 0; k--)
        if (k != skip && shape[k] > 1 && strides[k] == item) return k;
    return -1;
}

/* A copy's two strided views over two buffers, read from the arguments and checked. */
typedef struct {
    Py_buffer dst, src;
    Py_ssize_t ndim, dst_off, src_off, shape[MAX_DIMS], ds[MAX_DIMS], ss[MAX_DIMS];
    int empty, stream;
} views_t;

/* Parse "dst, dst_offset, dst_strides, src, src_offset, src_strides, shape, width" (and
 * "stream" where format allows it) into v, which holds both buffers until the caller
 * releases them; width is the element width or run length in bytes. -1 with an
 * exception set on error (the buffers are then released). */
static int parse_views(PyObject *args, const char *format, const char *name,
                       Py_ssize_t min_dims, views_t *v, Py_ssize_t *width) {
    PyObject *dst_strides_o, *src_strides_o, *shape_o;
    v->stream = 0;
    if (!PyArg_ParseTuple(args, format, &v->dst, &v->dst_off, &dst_strides_o, &v->src,
                          &v->src_off, &src_strides_o, &shape_o, width, &v->stream))
        return -1;
    v->ndim = PySequence_Size(shape_o);
    if (v->ndim < 0) goto fail;
    if (v->ndim < min_dims || v->ndim > MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd to %d dims, got %zd", name, min_dims,
                     MAX_DIMS, v->ndim);
        goto fail;
    }
    if (read_ints(shape_o, v->shape, v->ndim, "shape") ||
        read_ints(dst_strides_o, v->ds, v->ndim, "dst_strides") ||
        read_ints(src_strides_o, v->ss, v->ndim, "src_strides"))
        goto fail;
    v->empty = 0;
    for (Py_ssize_t k = 0; k < v->ndim; k++) {
        if (v->shape[k] < 0) {
            PyErr_Format(PyExc_ValueError, "%s: negative size %zd in shape", name, v->shape[k]);
            goto fail;
        }
        v->empty |= v->shape[k] == 0;
    }
    return 0;
fail:
    PyBuffer_Release(&v->dst);
    PyBuffer_Release(&v->src);
    return -1;
}

/* 0 if both views lie inside their buffers for elements of width bytes, else -1. */
static int check_views(views_t *v, Py_ssize_t width) {
    return check_view("dst", v->dst.len, v->dst_off, v->ds, v->shape, v->ndim, width) ||
           check_view("src", v->src.len, v->src_off, v->ss, v->shape, v->ndim, width);
}

/* Whether every destination address base + offset + sum(i * stride) is a multiple of 16. */
static int dst_aligned(const views_t *v) {
    if (((uintptr_t)v->dst.buf + (uintptr_t)v->dst_off) % 16) return 0;
    for (Py_ssize_t k = 0; k < v->ndim; k++)
        if (v->shape[k] > 1 && v->ds[k] % 16) return 0;
    return 1;
}

static PyObject *transpose(PyObject *self, PyObject *args) {
    views_t v;
    Py_ssize_t item;
    if (parse_views(args, "w*nOy*nOOn", "transpose", 2, &v, &item)) return NULL;
    PyObject *result = NULL;
    if (item != 1 && item != 2 && item != 4 && item != 8) {
        PyErr_Format(PyExc_ValueError, "transpose: itemsize must be 1, 2, 4 or 8, got %zd", item);
        goto done;
    }
    if (v.empty) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (check_views(&v, item)) goto done;
    Py_ssize_t *shape = v.shape, *ds = v.ds, *ss = v.ss, ndim = v.ndim;
    Py_ssize_t a = contiguous_dim(ss, shape, ndim, item, -1);  /* src-contiguous: dst rows */
    Py_ssize_t b = contiguous_dim(ds, shape, ndim, item, a);   /* dst-contiguous: src rows */
    if (a < 0 || b < 0) {
        PyErr_Format(PyExc_ValueError,
                     "transpose: not an element transpose: needs one dim of size > 1 with "
                     "stride %zd (the itemsize) in src and another in dst",
                     item);
        goto done;
    }
    /* The other dims, outermost first, walked with an odometer. */
    Py_ssize_t outer[MAX_DIMS], n_outer = 0, index[MAX_DIMS];
    for (Py_ssize_t k = 0; k < ndim; k++)
        if (k != a && k != b) outer[n_outer++] = k;
    memset(index, 0, sizeof index);
    char *d = (char *)v.dst.buf;
    const char *s = (const char *)v.src.buf;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        Py_ssize_t d_at = v.dst_off, s_at = v.src_off;
        for (Py_ssize_t k = 0; k < n_outer; k++) {
            d_at += index[k] * ds[outer[k]];
            s_at += index[k] * ss[outer[k]];
        }
        transpose_2d_any(d + d_at, ds[a], s + s_at, ss[b], shape[a], shape[b], item);
        Py_ssize_t k = n_outer - 1;
        while (k >= 0 && ++index[k] == shape[outer[k]]) index[k--] = 0;
        if (k < 0) break;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&v.dst);
    PyBuffer_Release(&v.src);
    return result;
}

/* One run of n bytes; nt: non-temporal stores (n a multiple of 16, d 16-byte aligned). */
INLINE void copy_run(char *d, const char *s, Py_ssize_t n, int nt) {
#if SPYRE_SSE2
    if (nt) {
        Py_ssize_t k = 0;
        for (; k + 64 <= n; k += 64) {
            __m128i r0 = LD(s + k), r1 = LD(s + k + 16), r2 = LD(s + k + 32), r3 = LD(s + k + 48);
            ST_NT(d + k, r0);
            ST_NT(d + k + 16, r1);
            ST_NT(d + k + 32, r2);
            ST_NT(d + k + 48, r3);
        }
        for (; k < n; k += 16) ST_NT(d + k, LD(s + k));
        return;
    }
#endif
    memcpy(d, s, (size_t)n);
}

/* copy_run at every index of v's loops, the innermost one in a tight loop. */
INLINE void copy_loops(char *d, const char *s, const views_t *v, Py_ssize_t run, int nt) {
    Py_ssize_t ndim = v->ndim, index[MAX_DIMS];
    if (ndim == 0) {
        copy_run(d + v->dst_off, s + v->src_off, run, nt);
        return;
    }
    Py_ssize_t last = ndim - 1, n = v->shape[last], dl = v->ds[last], sl = v->ss[last];
    memset(index, 0, sizeof index);
    for (;;) {
        Py_ssize_t d_at = v->dst_off, s_at = v->src_off;
        for (Py_ssize_t k = 0; k < last; k++) {
            d_at += index[k] * v->ds[k];
            s_at += index[k] * v->ss[k];
        }
        for (Py_ssize_t i = 0; i < n; i++) copy_run(d + d_at + i * dl, s + s_at + i * sl, run, nt);
        Py_ssize_t k = last - 1;
        while (k >= 0 && ++index[k] == v->shape[k]) index[k--] = 0;
        if (k < 0) break;
    }
}

static PyObject *copy_runs(PyObject *self, PyObject *args) {
    views_t v;
    Py_ssize_t run;
    if (parse_views(args, "w*nOy*nOOn|p", "copy_runs", 0, &v, &run)) return NULL;
    PyObject *result = NULL;
    if (run < 1) {
        PyErr_Format(PyExc_ValueError, "copy_runs: run must be at least 1 byte, got %zd", run);
        goto done;
    }
    if (v.empty) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (check_views(&v, run)) goto done;
    int nt = SPYRE_SSE2 && v.stream && run % 16 == 0 && dst_aligned(&v);
    char *d = (char *)v.dst.buf;
    const char *s = (const char *)v.src.buf;
    Py_BEGIN_ALLOW_THREADS
    if (nt) {
        copy_loops(d, s, &v, run, 1);
#if SPYRE_SSE2
        _mm_sfence();
#endif
    } else {
        copy_loops(d, s, &v, run, 0);
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&v.dst);
    PyBuffer_Release(&v.src);
    return result;
}

static PyMethodDef methods[] = {
    {"transpose", transpose, METH_VARARGS,
     "transpose(dst, dst_offset, dst_strides, src, src_offset, src_strides, shape, itemsize)\n"
     "--\n\n"
     "Copy a strided view of src into a strided view of dst (shape and strides in bytes)\n"
     "where one dim is contiguous in src and another in dst: an element transpose in\n"
     "SIMD tiles. Raises ValueError if a view leaves its buffer or no such dims exist."},
    {"copy_runs", copy_runs, METH_VARARGS,
     "copy_runs(dst, dst_offset, dst_strides, src, src_offset, src_strides, shape, run,\n"
     "          stream=False)\n"
     "--\n\n"
     "For every index of the loops shape (outermost first; offsets and strides in bytes),\n"
     "copy run contiguous bytes from src to dst, in loop order. stream: non-temporal\n"
     "stores when every destination run is 16-byte aligned and a multiple of 16 bytes.\n"
     "Raises ValueError if a view leaves its buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "spyrejax.dma._transpose",
    "The host DMA engine's copy kernels (see spyrejax.dma._host_dma).", -1, methods,
};

PyMODINIT_FUNC PyInit__transpose(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "SIMD", SPYRE_SSE2) < 0 ||
              PyModule_AddIntConstant(m, "MAX_DIMS", MAX_DIMS) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
