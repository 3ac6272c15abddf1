/*
 * spyrejax.dma._tiles: device -> host of a tiled image, as an XLA FFI custom call.
 *
 * Inside jax.jit a transfer of its own whose last host segment is one tile dim and the
 * sticks (the last tile partly filled) is, in XLA, a transpose, reshape and slice that
 * its CPU backend fuses into a loop run element by element (about 11x a copy's CPU time),
 * or a loop of box updates over tiles (about 2x: 128-byte rows written at the host row's
 * stride). This handler copies each host row's sticks in host order, one memcpy per
 * stick, so the result is written once and sequentially (about 1.2x; measurements in
 * benchmarks/README.md item 30).
 *
 * The image is [outer, count, inner, lanes] (count tiles of lanes elements per stick;
 * outer and inner the other device dims, already in host order); the result is
 * [outer, inner, width]: row (a, b) holds tile t's stick at columns [t * lanes, (t + 1) *
 * lanes), the last tile only its width - (count - 1) * lanes valid lanes. The buffers'
 * sizes are checked against these extents before anything is copied.
 *
 * H2dTiles is the inverse (host -> device): each host row's sticks are copied to their
 * tiles, one memcpy per stick, and the last tile's padding lanes get the fill element
 * (a one-element buffer of the same type); the host array is read once, in order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error D2hTilesImpl(ffi::AnyBuffer src, ffi::Result<ffi::AnyBuffer> dst,
                               int64_t outer, int64_t count, int64_t inner, int64_t lanes,
                               int64_t width) {
  const int64_t item = static_cast<int64_t>(ffi::ByteWidth(src.element_type()));
  const int64_t last = width - (count - 1) * lanes;
  if (outer < 1 || count < 1 || inner < 1 || lanes < 1 || last < 1 || last > lanes ||
      dst->element_type() != src.element_type() ||
      static_cast<int64_t>(src.element_count()) != outer * count * inner * lanes ||
      static_cast<int64_t>(dst->element_count()) != outer * inner * width)
    return ffi::Error::InvalidArgument("d2h_tiles: buffers do not match the tiling");
  const char *s = static_cast<const char *>(src.untyped_data());
  char *d = static_cast<char *>(dst->untyped_data());
  const int64_t run = lanes * item, tail = last * item, step = inner * run;
  for (int64_t a = 0; a < outer; a++) {
    for (int64_t b = 0; b < inner; b++) {
      char *row = d + (a * inner + b) * width * item;
      const char *stick = s + (a * count * inner + b) * run;
      for (int64_t t = 0; t + 1 < count; t++) std::memcpy(row + t * run, stick + t * step, run);
      std::memcpy(row + (count - 1) * run, stick + (count - 1) * step, tail);
    }
  }
  return ffi::Error::Success();
}

// The tiling's extents, the attributes both handlers take (in their parameters' order).
template <typename Binding>
static auto WithTiling(Binding binding) {
  return std::move(binding)
      .template Attr<int64_t>("outer")
      .template Attr<int64_t>("count")
      .template Attr<int64_t>("inner")
      .template Attr<int64_t>("lanes")
      .template Attr<int64_t>("width");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(D2hTiles, D2hTilesImpl,
                              WithTiling(ffi::Ffi::Bind().Arg<ffi::AnyBuffer>().Ret<ffi::AnyBuffer>()));

static ffi::Error H2dTilesImpl(ffi::AnyBuffer src, ffi::AnyBuffer fill,
                               ffi::Result<ffi::AnyBuffer> dst, int64_t outer, int64_t count,
                               int64_t inner, int64_t lanes, int64_t width) {
  const int64_t item = static_cast<int64_t>(ffi::ByteWidth(src.element_type()));
  const int64_t last = width - (count - 1) * lanes;
  if (outer < 1 || count < 1 || inner < 1 || lanes < 1 || last < 1 || last > lanes ||
      dst->element_type() != src.element_type() || fill.element_type() != src.element_type() ||
      fill.element_count() != 1 ||
      static_cast<int64_t>(dst->element_count()) != outer * count * inner * lanes ||
      static_cast<int64_t>(src.element_count()) != outer * inner * width)
    return ffi::Error::InvalidArgument("h2d_tiles: buffers do not match the tiling");
  const char *s = static_cast<const char *>(src.untyped_data());
  const char *f = static_cast<const char *>(fill.untyped_data());
  char *d = static_cast<char *>(dst->untyped_data());
  const int64_t run = lanes * item, tail = last * item, step = inner * run;
  for (int64_t a = 0; a < outer; a++) {
    for (int64_t b = 0; b < inner; b++) {
      const char *row = s + (a * inner + b) * width * item;
      char *stick = d + (a * count * inner + b) * run;
      for (int64_t t = 0; t + 1 < count; t++) std::memcpy(stick + t * step, row + t * run, run);
      char *end = stick + (count - 1) * step;
      std::memcpy(end, row + (count - 1) * run, tail);
      for (int64_t k = tail; k < run; k += item) std::memcpy(end + k, f, item);
    }
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(H2dTiles, H2dTilesImpl,
                              WithTiling(ffi::Ffi::Bind()
                                             .Arg<ffi::AnyBuffer>()
                                             .Arg<ffi::AnyBuffer>()
                                             .Ret<ffi::AnyBuffer>()));

static PyObject *h2d_tiles(PyObject *, PyObject *) {
  return PyCapsule_New(reinterpret_cast<void *>(H2dTiles), nullptr, nullptr);
}

static PyObject *d2h_tiles(PyObject *, PyObject *) {
  return PyCapsule_New(reinterpret_cast<void *>(D2hTiles), nullptr, nullptr);
}

static PyMethodDef methods[] = {
    {"d2h_tiles", d2h_tiles, METH_NOARGS, "The XLA FFI handler of d2h_tiles, as a capsule."},
    {"h2d_tiles", h2d_tiles, METH_NOARGS, "The XLA FFI handler of h2d_tiles, as a capsule."},
    {nullptr, nullptr, 0, nullptr}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tiles",
                                    "h2d and d2h of a tiled image as XLA FFI custom calls.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__tiles(void) { return PyModule_Create(&module); }
