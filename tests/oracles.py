"""Independent NumPy oracles for layouts, written from the spec's text (section 4).

They share no code with spyrejax: each is the most direct reading of a rule.
"""

import ml_dtypes
import numpy as np


def row_major(shape):
    return tuple(int(np.prod(shape[i + 1 :], dtype=np.int64)) for i in range(len(shape)))


def coords_by_rule(shape, layout, host_strides=None):
    """Spec section 4 for layouts without folding: device coords of every host element.

    Each device dim (size > 1, stride > 0) belongs to the host dim (size > 1) with the
    largest host stride <= its stride_map entry; a host coordinate x is spread over its
    device dims from the largest stride_map entry to the smallest:
    ``c_j = x // (stride_map[j] / hs[d]); x %= stride_map[j] / hs[d]``.
    Returns an array of shape (num host elements, device rank), host elements in
    row-major order.
    """
    hs = host_strides or row_major(shape)
    idx = np.indices(shape, dtype=np.int64, sparse=True)  # each dim's range, broadcast
    coords = np.zeros((*shape, len(layout.device_size)), dtype=np.int64)
    if not coords.size:
        return coords.reshape(0, len(layout.device_size))  # no element to place
    live = [d for d, n in enumerate(shape) if n > 1]
    owner = {}
    for j, (size, m) in enumerate(zip(layout.device_size, layout.stride_map, strict=True)):
        if size > 1 and m > 0:
            owner[j] = max((d for d in live if hs[d] <= m), key=lambda d: hs[d])
    for d in live:
        mine = sorted((j for j in owner if owner[j] == d), key=lambda j: -layout.stride_map[j])
        x = idx[d]
        for j in mine:
            ratio = layout.stride_map[j] // hs[d]
            coords[..., j] = x // ratio
            x = x % ratio
    return coords.reshape(-1, len(layout.device_size))


def host_offsets(shape, host_strides=None):
    hs = host_strides or row_major(shape)
    offsets = sum(
        (i * s for i, s in zip(np.indices(shape, dtype=np.int64, sparse=True), hs, strict=True)),
        start=np.zeros(shape, dtype=np.int64),
    )
    return offsets.reshape(-1)


def dot_stride_map(coords, layout):
    """``dot(c, stride_map)`` with -1 entries contributing 0 (spec section 3)."""
    m = np.array([max(s, 0) for s in layout.stride_map], dtype=np.int64)
    return coords @ m


def special_bits(dtype):
    """The bit patterns of a float ``dtype`` that a move is most likely to alter.

    Read off the IEEE-style fields (sign, exponent, mantissa), whatever the format
    makes of them: both zeros; the smallest, largest and another subnormal; the
    patterns with an all-ones exponent (infinities and NaNs: quiet and signalling,
    with payloads; the largest finite values of the formats without infinities); and
    the smallest normal. Each comes with both signs. Empty for non-float dtypes.
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        return np.zeros(0, dtype)
    width = 8 * dtype.itemsize
    nmant = int(ml_dtypes.finfo(dtype).nmant)
    bits = np.dtype(f"uint{width}")
    exp_ones = ((1 << (width - 1 - nmant)) - 1) << nmant
    full, top = (1 << nmant) - 1, 1 << (nmant - 1)
    mantissas = sorted({1, top, full, top | 1, full ^ top, 0b101 & full})
    patterns = {0, 1 << nmant}
    patterns |= set(mantissas)  # subnormals
    patterns |= {exp_ones | m for m in (0, *mantissas)}  # infinities and NaNs
    sign = 1 << (width - 1)
    patterns |= {p | sign for p in patterns}
    return np.array(sorted(patterns), bits).view(dtype)


def random_bits(shape, dtype, rng):
    """Arbitrary bit patterns of ``dtype``, every special pattern included where it fits.

    Uniformly random bits, then each of :func:`special_bits` at a random position (as
    many as the array holds), so subnormals, NaN payloads, -0.0 and infinities are in
    every example rather than only in the few a uniform draw happens to hit.
    """
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    bits = np.dtype(f"uint{8 * dtype.itemsize}")
    raw = rng.integers(0, np.iinfo(bits).max, size=shape, dtype=bits, endpoint=True)
    specials = special_bits(dtype).view(bits)
    flat = raw.reshape(-1)
    k = min(flat.size, specials.size)
    flat[rng.choice(flat.size, k, replace=False)] = rng.permutation(specials)[:k]
    return raw.view(dtype)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == np.bool_:
        return a.shape == b.shape and bool((a == b).all())
    bits = np.dtype(f"uint{8 * a.dtype.itemsize}")
    return a.shape == b.shape and a.dtype == b.dtype and bool((a.view(bits) == b.view(bits)).all())


def run_descriptors(dci, src_flat, dst_flat):
    """Execute DCI descriptors literally, one element per loop index (brute force).

    ``dst[offset_dst + dot(i, stride_dst)] = src[offset_src + dot(i, stride_src)]`` for
    every loop index ``i`` of every descriptor. Returns the new destination and how many
    times each destination element was written.
    """
    dst = np.array(dst_flat, copy=True)
    writes = np.zeros(dst.shape, dtype=np.int64)
    for d in dci:
        n = int(np.prod(d.size))
        idx = np.indices(d.size).reshape(len(d.size), n)
        src_off = d.offset_src + (idx * np.array(d.stride_src)[:, None]).sum(axis=0)
        dst_off = d.offset_dst + (idx * np.array(d.stride_dst)[:, None]).sum(axis=0)
        dst[dst_off] = src_flat[src_off]
        np.add.at(writes, dst_off, 1)
    return dst, writes


def check_descriptors_against_coords(h2d, d2h, host, coords, device_size):
    """Run a DCI pair literally and check it against the device coordinates of each element.

    ``host``: the flat host buffer, element ``k`` (row-major order) holding ``k`` and -1
    where no element lies. ``coords``: ``[n, device rank]``, element ``k``'s device
    coordinates by an independent oracle. The host-to-device descriptors must put element
    ``k`` at ``coords[k]``, writing no position twice; the device-to-host ones must give
    ``host`` back, writing no host position twice. Returns how many times each device
    position was written.
    """
    n = len(coords)
    image, writes = run_descriptors(h2d, host, np.full(int(np.prod(device_size)), -1))
    at = np.ravel_multi_index(tuple(np.asarray(coords).T), device_size)
    np.testing.assert_array_equal(image[at], np.arange(n))
    assert (writes <= 1).all()
    back, reads = run_descriptors(d2h, image, np.full(len(host), -1))
    np.testing.assert_array_equal(back, host)
    assert (reads <= 1).all()
    return writes


def data_mask_by_rule(shape, layout, host_strides=None):
    """Spec section 4, brute force: True on the device positions some host element maps to.

    A position is padding iff it is the image of no host element. Broadcast device dims
    (stride 0) hold every element at each of their coordinates.
    """
    mask = np.zeros(layout.device_size, dtype=bool)
    coords = coords_by_rule(shape, layout, host_strides)
    mask[tuple(coords.T)] = True
    for j, (size, m) in enumerate(zip(layout.device_size, layout.stride_map, strict=True)):
        if m == 0:
            mask = np.repeat(mask.take([0], axis=j), size, axis=j)
    return mask


def image_by_rule(x, layout, fill):
    """The device image of host array ``x`` by the rule: each element at its coordinate."""
    image = np.full(layout.device_size, fill, dtype=x.dtype)
    coords = coords_by_rule(x.shape, layout)
    image[tuple(coords.T)] = x.reshape(-1)
    for j, (size, m) in enumerate(zip(layout.device_size, layout.stride_map, strict=True)):
        if m == 0:
            image = np.repeat(image.take([0], axis=j), size, axis=j)
    return image


def gapped_image(inner_image, gaps, fill):
    """The image of a layout with gaps: its gap-free image, ``gaps`` around it filled.

    A gap (``(front, back)`` device positions on a dim) holds no data, so the image is
    the image of the valid range padded on each dim (spec of issue 26, item 2).
    """
    return np.pad(inner_image, [tuple(g) for g in gaps], constant_values=fill)
