/* kohort.protocol._crecords: the compiled twin of records.py's record decoding hot path.
 *
 * What lives here (all behind records.py, which is the public interface; use that, not this):
 *
 *   configure(decode_error, corrupt_error, decompress, legacy)
 *       Called once by records.py: the exception classes to raise, compression.decompress, and
 *       the Python reader of legacy (magic 0/1) entries, which are rare and stay in Python.
 *   decode_fetch(buf, check_crc=False, max_size=..., min_offset=None, max_offset=None,
 *                record_factory=None, prefix=(), suffix=()) -> list
 *       Every data record of every complete batch of a fetch payload, in order, exactly as
 *       records.iter_records yields them: tuples (offset, timestamp, key, value, headers).
 *       With record_factory, each record is record_factory(*prefix, offset, timestamp,
 *       timestamp_type, key, value, headers, leader_epoch) (leader_epoch None when unknown: -1
 *       in the batch, or a legacy message), the layout of kohort.structs.ConsumerRecord with
 *       prefix (topic, partition); a tuple subclass without extra storage (ConsumerRecord, a
 *       namedtuple) is filled directly without calling its __new__. `suffix` fields follow
 *       leader_epoch (a share consumer's delivery count: ConsumerRecord's tenth field).
 *       min_offset <= offset < max_offset filters records (None: unbounded).
 *       max_size bounds what all the call's batches decompress to together (one budget, not one
 *       limit per batch): an int, or records.DecompressionBudget whose `left` is spent and
 *       written back (one budget for the partitions of a Fetch response).
 *   decode_columns(buf, check_crc=False, max_size=..., min_offset=None, max_offset=None) -> tuple
 *       The same records as Arrow-shaped buffers (see records.Columns for the layout).
 *   FetchCursor(buf, check_crc=False, max_size=..., min_offset=None, max_offset=None,
 *               record_factory=None, prefix=()).take(n) -> list
 *       decode_fetch's records n at a time: each take resumes where the last stopped, mid-batch
 *       included, and a compressed batch is decompressed once (records.RecordCursor wraps it).
 *   decode_chunk(buf, start, check_crc, max_size, max_records) -> (list, next)
 *       decode_fetch's tuples in pieces of whole entries (iter_records streams with it, so the
 *       records of one piece are freed while the next is decoded); max_size limits each batch.
 *   crc32c(data, crc=0) -> int
 *       CRC-32C (Castagnoli): SSE4.2 instructions when the CPU has them, else slicing-by-8 tables.
 *   check_batch(buf, pos=0) -> tuple | None
 *       records.validate_batch's success path in one call (the broker's Produce path): the 13
 *       header fields of the v2 batch at pos when it is complete, has magic 2, Length >= 49, a
 *       non-negative record count and a matching CRC-32C; None otherwise (validate_batch then
 *       names the problem in Python).
 *
 * The walk mirrors records.iter_records step for step (same checks in the same order, so the same
 * inputs fail, with the same exception classes). Where Python's unbounded ints give a result that
 * does not fit in 64 bits (an offset or timestamp overflowing int64, a 10-byte varlong with bits
 * above bit 63), NeedsPython is raised and records.py redoes the call in pure Python.
 * Every read is bounds-checked against the end of the current record, batch or buffer: malformed
 * input raises DecodeError (CorruptRecordError for integrity failures), never crashes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <time.h>
#include <string.h>

/* -- module state (set by configure) ------------------------------------------------------------ */
static PyObject *g_decode_error;       /* kohort.errors.DecodeError */
static PyObject *g_corrupt_error;      /* records.CorruptRecordError */
static PyObject *g_needs_python;       /* _crecords.NeedsPython */
static PyObject *g_decompress;         /* compression.decompress(codec, data, max_size) -> bytes */
static PyObject *g_legacy;             /* records._legacy_entries(d, pos, end, check_crc, max_size) */

#define LOG_OVERHEAD 12
#define BATCH_HEADER_SIZE 61
#define MIN_BATCH_LENGTH 49
#define LEGACY_MIN_LENGTH 14
#define MIN_RECORD_SIZE 7
#define ATTR_COMPRESSION_MASK 0x07
#define ATTR_TIMESTAMP_TYPE 0x08
#define ATTR_CONTROL 0x20
#define ATTRIBUTES_OFFSET 21
#define MAGIC_OFFSET 16

/* -- CRC-32C ------------------------------------------------------------------------------------ */
static uint32_t crc_table[8][256];

static void crc_init_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
        n--;
    }
    while (n >= 8) {
        uint32_t lo = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                      ((uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) |
                      ((uint32_t)p[7] << 24);
        lo ^= crc;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
              crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
              crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

/* Polynomials over GF(2) modulo the CRC-32C polynomial, bit-reflected as the CRC register holds
 * them (the x^0 coefficient in the top bit). The CRC register after bytes A then B is
 * reg(A) * x^(8|B|) + reg0(B), reg0 being B's register started from zero: so independent runs
 * over consecutive parts of a buffer combine into the CRC of the whole. */
static uint32_t gf2_mulmod(uint32_t a, uint32_t b)
{
    uint32_t prod = 0;
    for (uint32_t bit = 1u << 31; bit; bit >>= 1) {
        if (a & bit)
            prod ^= b;
        b = (b & 1) ? (b >> 1) ^ 0x82F63B78u : b >> 1;    /* b * x */
    }
    return prod;
}

static uint32_t x8_pow2[64];        /* x^(8 * 2^k) mod P */

static void crc_init_shift(void)
{
    uint32_t t = 1u << 23;          /* x^8 */
    for (int k = 0; k < 64; k++) {
        x8_pow2[k] = t;
        t = gf2_mulmod(t, t);
    }
}

/* reg * x^(8 n) mod P: the register `reg` moved past n zero bytes' worth of shifting */
static uint32_t crc_shift(uint32_t reg, size_t n)
{
    for (int k = 0; n; k++, n >>= 1)
        if (n & 1)
            reg = gf2_mulmod(x8_pow2[k], reg);
    return reg;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW_CRC 1
#include <nmmintrin.h>
#define CRC_LANES_MIN 4096          /* shorter buffers: one lane (the combining costs ~1 us) */
__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    if (n >= CRC_LANES_MIN) {
        /* three independent lanes over consecutive thirds: the crc32 instruction's latency is
         * three times its issue interval, so one dependency chain leaves two thirds of it idle */
        size_t third = (n / 24) * 8;
        const uint8_t *q = p + third, *r = p + 2 * third;
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < third; i += 8) {
            uint64_t v0, v1, v2;
            memcpy(&v0, p + i, 8);
            memcpy(&v1, q + i, 8);
            memcpy(&v2, r + i, 8);
            c = _mm_crc32_u64(c, v0);
            c1 = _mm_crc32_u64(c1, v1);
            c2 = _mm_crc32_u64(c2, v2);
        }
        c = crc_shift((uint32_t)c, third) ^ (uint32_t)c1;
        c = crc_shift((uint32_t)c, third) ^ (uint32_t)c2;
        p += 3 * third;
        n -= 3 * third;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
static int g_hw_crc;
#else
#define HAVE_HW_CRC 0
#endif

static uint32_t crc32c(uint32_t crc, const uint8_t *p, size_t n)
{
#if HAVE_HW_CRC
    if (g_hw_crc)
        return crc32c_hw(crc, p, n);
#endif
    return crc32c_sw(crc, p, n);
}

/* CRC-32C of a batch inside a buffer its caller holds exported (so it can neither move nor be
 * freed): from 64 KiB on, computed with the GIL released, so the consumer's I/O thread keeps
 * reading while the application thread checks a large fetched batch. */
#define CRC_NOGIL_MIN (64 * 1024)
static uint32_t crc32c_exported(const uint8_t *p, size_t n)
{
    if (n < CRC_NOGIL_MIN)
        return crc32c(0, p, n);
    uint32_t got;
    Py_BEGIN_ALLOW_THREADS
    got = crc32c(0, p, n);
    Py_END_ALLOW_THREADS
    return got;
}

/* -- big-endian reads (callers have checked bounds) --------------------------------------------- */
static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }
static inline uint32_t be32u(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline int32_t be32(const uint8_t *p) { return (int32_t)be32u(p); }
static inline int64_t be64(const uint8_t *p)
{
    return (int64_t)(((uint64_t)be32u(p) << 32) | be32u(p + 4));
}

/* -- errors ------------------------------------------------------------------------------------- */
static void *corrupt(const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (msg) {
        PyErr_SetObject(g_corrupt_error, msg);
        Py_DECREF(msg);
    }
    return NULL;
}

static void *needs_python(const char *why)
{
    PyErr_SetString(g_needs_python, why);
    return NULL;
}

/* -- varints -------------------------------------------------------------------------------------
 * Unsigned LEB128 with at most `max_bytes` bytes, all inside [*pp, lim). Python's decoder accepts
 * up to 5 (varint) or 10 (varlong) bytes and keeps every bit; a 5-byte value fits in 35 bits, a
 * 10-byte one may carry bits above 63, reported through *wide. Returns -1 with an exception set. */
static inline int read_uvarint(const uint8_t *d, Py_ssize_t *pp, Py_ssize_t lim, int max_bytes,
                               uint64_t *out, int *wide)
{
    Py_ssize_t p = *pp;
    if (p < lim && d[p] < 0x80) {            /* the common one-byte case */
        *out = d[p];
        *pp = p + 1;
        return 0;
    }
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= lim) {
            corrupt("truncated varint in record");
            return -1;
        }
        uint8_t b = d[p++];
        if (shift == 63) {
            if (b & 0x7E)
                *wide = 1;
            result |= (uint64_t)(b & 1) << 63;
        } else {
            result |= (uint64_t)(b & 0x7F) << shift;
        }
        if (b < 0x80) {
            *out = result;
            *pp = p;
            return 0;
        }
        shift += 7;
    }
    corrupt("varint too long in record");
    return -1;
}

static inline int64_t unzigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/* -- output sinks ------------------------------------------------------------------------------- */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} vec_t;

static int vec_reserve(vec_t *v, Py_ssize_t extra)
{
    if (extra > PY_SSIZE_T_MAX - v->len) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t need = v->len + extra;
    if (need <= v->cap)
        return 0;
    Py_ssize_t cap = v->cap ? v->cap : 256;
    while (cap < need)
        cap = cap > PY_SSIZE_T_MAX / 2 ? need : cap * 2;
    char *nd = PyMem_Realloc(v->data, (size_t)cap);
    if (!nd) {
        PyErr_NoMemory();
        return -1;
    }
    v->data = nd;
    v->cap = cap;
    return 0;
}

static inline int vec_put(vec_t *v, const void *src, Py_ssize_t n)
{
    if (v->cap - v->len < n && vec_reserve(v, n) < 0)
        return -1;
    if (n)
        memcpy(v->data + v->len, src, (size_t)n);
    v->len += n;
    return 0;
}

enum { MODE_TUPLES, MODE_FACTORY, MODE_COLUMNS };

typedef struct {
    int mode;
    int has_min, has_max;
    int64_t min_offset, max_offset;
    /* tuples / factory */
    PyObject *out;             /* list */
    PyObject *factory;         /* borrowed */
    PyObject *prefix;          /* tuple, borrowed */
    PyObject *suffix;          /* tuple after the record's fields, borrowed (decode_fetch only) */
    int factory_direct;        /* tuple subclass filled without __new__ */
    /* columns */
    Py_ssize_t n;
    vec_t offsets, timestamps, tstypes, key_valid, key_offs, key_data, val_valid, val_offs,
        val_data;
    PyObject *headers;         /* list of per-record header lists, created at the first header */
    /* input */
    PyObject *src;             /* the caller's buffer object, borrowed */
    PyObject *src_bytes;       /* bytes view of src for the legacy reader (created lazily) */
    PyObject *src_view;        /* memoryview of src for decompress (created lazily) */
    int check_crc;
    PyObject *max_size;        /* int, borrowed: each decompression's limit when not budgeted */
    int budgeted;              /* decode_fetch/decode_columns: one budget for the whole call */
    long long budget_left;     /* decompressed bytes this call may still produce */
    PyObject *budget_obj;      /* records.DecompressionBudget given by the caller, borrowed, or NULL */
    Py_ssize_t start, next;    /* walk from `start`; `next`: where a chunked walk stopped, -1 at the end */
    Py_ssize_t max_records;    /* chunked walk (tuples only): stop at the first entry boundary past this */
    Py_ssize_t take_limit;     /* FetchCursor.take: stop right after the record that fills `out` to this */
    PyObject *last_ts_obj;     /* the last timestamp made, and its value */
    int64_t last_ts;
} sink_t;

typedef struct {               /* one record's raw fields */
    int64_t offset, timestamp;
    const uint8_t *key, *value;   /* NULL: null */
    Py_ssize_t key_len, value_len;
    PyObject *headers;            /* new reference: list (possibly empty), or NULL = empty */
    int tstype, epoch;
} rec_t;

static int bit_append(vec_t *bits, Py_ssize_t i, int valid)
{
    if ((i & 7) == 0) {
        uint8_t z = 0;
        if (vec_put(bits, &z, 1) < 0)
            return -1;
    }
    if (valid)
        ((uint8_t *)bits->data)[i >> 3] |= (uint8_t)(1u << (i & 7));
    return 0;
}

static int column_bytes(vec_t *valid, vec_t *offs, vec_t *data, Py_ssize_t i, const uint8_t *p,
                        Py_ssize_t len)
{
    if (bit_append(valid, i, p != NULL) < 0)
        return -1;
    if (p && vec_put(data, p, len) < 0)
        return -1;
    if (data->len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "decode_columns: keys or values exceed 2 GiB in one call (int32 Arrow offsets)");
        return -1;
    }
    int32_t end = (int32_t)data->len;
    return vec_put(offs, &end, 4);
}

/* Emit one record; steals r->headers. */
static int emit(sink_t *s, rec_t *r)
{
    if ((s->has_min && r->offset < s->min_offset) || (s->has_max && r->offset >= s->max_offset)) {
        Py_XDECREF(r->headers);
        return 0;
    }
    if (s->mode == MODE_COLUMNS) {
        Py_ssize_t i = s->n;
        int8_t tt = (int8_t)r->tstype;
        if (vec_put(&s->offsets, &r->offset, 8) < 0 || vec_put(&s->timestamps, &r->timestamp, 8) < 0 ||
            vec_put(&s->tstypes, &tt, 1) < 0 ||
            column_bytes(&s->key_valid, &s->key_offs, &s->key_data, i, r->key, r->key_len) < 0 ||
            column_bytes(&s->val_valid, &s->val_offs, &s->val_data, i, r->value, r->value_len) < 0)
            goto fail;
        int nonempty = r->headers && PyList_GET_SIZE(r->headers) > 0;
        if (nonempty && !s->headers) {
            s->headers = PyList_New(i);
            if (!s->headers)
                goto fail;
            for (Py_ssize_t j = 0; j < i; j++) {
                PyObject *e = PyList_New(0);
                if (!e)
                    goto fail;
                PyList_SET_ITEM(s->headers, j, e);
            }
        }
        if (s->headers) {
            PyObject *h = r->headers;
            r->headers = NULL;
            if (!h && !(h = PyList_New(0)))
                goto fail;
            int rc = PyList_Append(s->headers, h);
            Py_DECREF(h);
            if (rc < 0)
                goto fail;
        }
        Py_CLEAR(r->headers);
        s->n = i + 1;
        return 0;
    fail:
        Py_CLEAR(r->headers);
        return -1;
    }

    PyObject *o = NULL, *t = NULL, *k = NULL, *v = NULL, *h = r->headers;
    r->headers = NULL;
    if (!h && !(h = PyList_New(0)))
        return -1;
    if (!(o = PyLong_FromLongLong(r->offset)))
        goto err;
    /* ints are immutable: records of one millisecond (and all of a LogAppendTime batch) share
     * one timestamp object */
    if (s->last_ts_obj && s->last_ts == r->timestamp) {
        t = Py_NewRef(s->last_ts_obj);
    } else {
        if (!(t = PyLong_FromLongLong(r->timestamp)))
            goto err;
        Py_XSETREF(s->last_ts_obj, Py_NewRef(t));
        s->last_ts = r->timestamp;
    }
    if (r->key) {
        if (!(k = PyBytes_FromStringAndSize((const char *)r->key, r->key_len)))
            goto err;
    } else {
        k = Py_NewRef(Py_None);
    }
    if (r->value) {
        if (!(v = PyBytes_FromStringAndSize((const char *)r->value, r->value_len)))
            goto err;
    } else {
        v = Py_NewRef(Py_None);
    }
    PyObject *item;
    if (s->mode == MODE_TUPLES) {
        item = PyTuple_New(5);
        if (!item)
            goto err;
        PyTuple_SET_ITEM(item, 0, o);
        PyTuple_SET_ITEM(item, 1, t);
        PyTuple_SET_ITEM(item, 2, k);
        PyTuple_SET_ITEM(item, 3, v);
        PyTuple_SET_ITEM(item, 4, h);
    } else {
        Py_ssize_t np = s->prefix ? PyTuple_GET_SIZE(s->prefix) : 0;
        Py_ssize_t ns = s->suffix ? PyTuple_GET_SIZE(s->suffix) : 0, na = np + 7 + ns;
        PyObject *args[32];
        PyObject *tt = PyLong_FromLong(r->tstype);
        PyObject *ep = r->epoch == -1 ? Py_NewRef(Py_None) : PyLong_FromLong(r->epoch);
        if (!tt || !ep) {
            Py_XDECREF(tt);
            Py_XDECREF(ep);
            goto err;
        }
        for (Py_ssize_t j = 0; j < np; j++)
            args[j] = PyTuple_GET_ITEM(s->prefix, j);
        args[np] = o; args[np + 1] = t; args[np + 2] = tt; args[np + 3] = k; args[np + 4] = v;
        args[np + 5] = h; args[np + 6] = ep;
        for (Py_ssize_t j = 0; j < ns; j++)
            args[np + 7 + j] = PyTuple_GET_ITEM(s->suffix, j);
        if (s->factory_direct) {
            PyTypeObject *tp = (PyTypeObject *)s->factory;
            item = tp->tp_alloc(tp, na);
            if (item) {
                for (Py_ssize_t j = 0; j < np; j++)
                    PyTuple_SET_ITEM(item, j, Py_NewRef(args[j]));
                for (Py_ssize_t j = np; j < np + 7; j++)
                    PyTuple_SET_ITEM(item, j, args[j]);     /* steals o, t, tt, k, v, h, ep */
                for (Py_ssize_t j = np + 7; j < na; j++)
                    PyTuple_SET_ITEM(item, j, Py_NewRef(args[j]));
            } else {
                Py_DECREF(tt);
                Py_DECREF(ep);
                goto err;
            }
        } else {
            item = PyObject_Vectorcall(s->factory, args, (size_t)na, NULL);
            Py_DECREF(o); Py_DECREF(t); Py_DECREF(k); Py_DECREF(v); Py_DECREF(h);
            Py_DECREF(tt); Py_DECREF(ep);
            if (!item)
                return -1;
        }
    }
    if (s->mode == MODE_TUPLES || s->factory_direct) {
        /* Untracked while the call runs: a collection triggered by our own allocations then has
         * nothing of ours to scan (it would rescan the growing output again and again).
         * retrack() tracks again those with headers before the list is handed out. */
        PyObject_GC_UnTrack(item);
        PyObject_GC_UnTrack(h);
    }
    int rc = PyList_Append(s->out, item);
    Py_DECREF(item);
    return rc;
err:
    Py_XDECREF(o); Py_XDECREF(t); Py_XDECREF(k); Py_XDECREF(v); Py_XDECREF(h);
    return -1;
}

/* -- one record's headers ----------------------------------------------------------------------- */
static PyObject *read_headers(const uint8_t *d, Py_ssize_t *pp, Py_ssize_t rec_end, int64_t count)
{
    Py_ssize_t p = *pp;
    if (count < 0 || count > (rec_end - p) / 2)
        return corrupt("invalid record header count %lld", (long long)count);
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (!list)
        return NULL;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        uint64_t b;
        int wide = 0;
        if (read_uvarint(d, &p, rec_end, 5, &b, &wide) < 0)
            goto fail;
        int64_t klen = unzigzag(b);
        if (klen < 0 || klen > rec_end - p) {
            corrupt("invalid record header key length %lld", (long long)klen);
            goto fail;
        }
        PyObject *hk = PyUnicode_DecodeUTF8((const char *)d + p, (Py_ssize_t)klen, "strict");
        if (!hk) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                corrupt("record header key is not UTF-8");
            }
            goto fail;
        }
        p += (Py_ssize_t)klen;
        if (read_uvarint(d, &p, rec_end, 5, &b, &wide) < 0) {
            Py_DECREF(hk);
            goto fail;
        }
        int64_t vlen = unzigzag(b);
        PyObject *hv;
        if (vlen >= 0) {
            if (vlen > rec_end - p) {
                Py_DECREF(hk);
                corrupt("record header value length %lld overruns the record", (long long)vlen);
                goto fail;
            }
            hv = PyBytes_FromStringAndSize((const char *)d + p, (Py_ssize_t)vlen);
            p += (Py_ssize_t)vlen;
        } else if (vlen == -1) {
            hv = Py_NewRef(Py_None);
        } else {
            Py_DECREF(hk);
            corrupt("invalid record header value length %lld", (long long)vlen);
            goto fail;
        }
        if (!hv) {
            Py_DECREF(hk);
            goto fail;
        }
        PyObject *pair = PyTuple_New(2);
        if (!pair) {
            Py_DECREF(hk);
            Py_DECREF(hv);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, hk);
        PyTuple_SET_ITEM(pair, 1, hv);
        PyList_SET_ITEM(list, i, pair);
    }
    *pp = p;
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

/* -- the records section of one batch (uncompressed bytes d[p:end]) ---------------------------- */
/* Records *ip .. count-1 of a batch body, from *pp: 0 once all are read (and the body is used up
 * exactly), 1 when the sink's take_limit was reached right after a record (*pp and *ip then say
 * where the next call resumes), -1 with an exception set. */
static int decode_records(sink_t *s, const uint8_t *d, Py_ssize_t *pp, Py_ssize_t end, int32_t *ip,
                          int32_t count, int64_t base_offset, int64_t base_ts, int lat, int64_t max_ts,
                          int epoch)
{
    Py_ssize_t p = *pp;
    rec_t r;
    r.tstype = lat ? 1 : 0;
    r.epoch = epoch;
    for (int32_t i = *ip; i < count; i++) {
        uint64_t b;
        int wide = 0;
        /* Length */
        if (read_uvarint(d, &p, end, 5, &b, &wide) < 0)
            return -1;
        if (b & 1) {
            corrupt("negative record length");
            return -1;
        }
        if ((b >> 1) > (uint64_t)(end - p)) {
            corrupt("record overruns its batch");
            return -1;
        }
        Py_ssize_t rec_end = p + (Py_ssize_t)(b >> 1);
        /* Attributes (unused), TimestampDelta */
        if (p >= rec_end) {
            corrupt("truncated record");
            return -1;
        }
        p++;
        if (read_uvarint(d, &p, rec_end, 10, &b, &wide) < 0)
            return -1;
        if (lat) {
            r.timestamp = max_ts;
        } else {
            if (wide) {
                needs_python("timestamp delta wider than 64 bits");
                return -1;
            }
            if (__builtin_add_overflow(base_ts, unzigzag(b), &r.timestamp)) {
                needs_python("timestamp outside int64");
                return -1;
            }
        }
        /* OffsetDelta */
        if (read_uvarint(d, &p, rec_end, 5, &b, &wide) < 0)
            return -1;
        if (__builtin_add_overflow(base_offset, unzigzag(b), &r.offset)) {
            needs_python("offset outside int64");
            return -1;
        }
        /* Key */
        if (read_uvarint(d, &p, rec_end, 5, &b, &wide) < 0)
            return -1;
        if (b & 1) {
            if (b != 1) {
                corrupt("invalid record key length");
                return -1;
            }
            r.key = NULL;
            r.key_len = 0;
        } else {
            if ((b >> 1) > (uint64_t)(rec_end - p)) {
                corrupt("record key overruns its record");
                return -1;
            }
            r.key = d + p;
            r.key_len = (Py_ssize_t)(b >> 1);
            p += r.key_len;
        }
        /* Value */
        if (read_uvarint(d, &p, rec_end, 5, &b, &wide) < 0)
            return -1;
        if (b & 1) {
            if (b != 1) {
                corrupt("invalid record value length");
                return -1;
            }
            r.value = NULL;
            r.value_len = 0;
        } else {
            if ((b >> 1) > (uint64_t)(rec_end - p)) {
                corrupt("record value overruns its record");
                return -1;
            }
            r.value = d + p;
            r.value_len = (Py_ssize_t)(b >> 1);
            p += r.value_len;
        }
        /* Headers */
        if (p >= rec_end) {
            corrupt("truncated record");
            return -1;
        }
        r.headers = NULL;
        if (d[p]) {
            if (read_uvarint(d, &p, rec_end, 5, &b, &wide) < 0)
                return -1;
            r.headers = read_headers(d, &p, rec_end, unzigzag(b));
            if (!r.headers)
                return -1;
        } else {
            p++;
        }
        if (p != rec_end) {
            Py_XDECREF(r.headers);
            corrupt("record length does not match its fields");
            return -1;
        }
        if (emit(s, &r) < 0)
            return -1;
        if (s->take_limit && PyList_GET_SIZE(s->out) >= s->take_limit) {
            *pp = p;
            *ip = i + 1;
            return 1;
        }
    }
    *ip = count;
    *pp = p;
    if (p != end) {
        corrupt("%zd bytes left over after the declared records", end - p);
        return -1;
    }
    return 0;
}

static int decode_body(sink_t *s, const uint8_t *d, Py_ssize_t p, Py_ssize_t end, int32_t count,
                       int64_t base_offset, int64_t base_ts, int lat, int64_t max_ts, int epoch)
{
    if (count < 0 || count > (end - p) / MIN_RECORD_SIZE) {
        corrupt("records count %d cannot fit in %zd bytes", (int)count, end - p);
        return -1;
    }
    int32_t i = 0;
    return decode_records(s, d, &p, end, &i, count, base_offset, base_ts, lat, max_ts, epoch);
}

/* -- legacy entries: Python reads them, we copy them into the sink ------------------------------ */
static int legacy_entry(sink_t *s, const uint8_t *d, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t end)
{
    if (!s->src_bytes) {
        if (PyBytes_CheckExact(s->src))
            s->src_bytes = Py_NewRef(s->src);
        else if (!(s->src_bytes = PyBytes_FromStringAndSize((const char *)d, n)))
            return -1;
    }
    PyObject *limit = s->budgeted ? PyLong_FromLongLong(s->budget_left) : Py_NewRef(s->max_size);
    if (!limit)
        return -1;
    PyObject *got = PyObject_CallFunction(g_legacy, "OnnOO", s->src_bytes, pos, end,
                                          s->check_crc ? Py_True : Py_False, limit);
    Py_DECREF(limit);
    if (!got)
        return -1;
    /* a compressed legacy wrapper spends its records' keys and values from the budget */
    int charge = s->budgeted && end - pos > 17 && (d[pos + 17] & 0x07);
    if (!PyList_CheckExact(got)) {
        Py_DECREF(got);
        PyErr_SetString(PyExc_TypeError, "legacy reader must return a list");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(got); i++) {
        /* (offset, timestamp, key, value, headers, timestamp_type) */
        PyObject *t = PyList_GET_ITEM(got, i);
        if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 6) {
            PyErr_SetString(PyExc_TypeError, "legacy reader must return 6-tuples");
            goto fail;
        }
        rec_t r;
        int overflow = 0, o2 = 0;
        r.offset = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(t, 0), &overflow);
        r.timestamp = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(t, 1), &o2);
        if (PyErr_Occurred())
            goto fail;
        if (overflow || o2) {
            needs_python("legacy offset outside int64");
            goto fail;
        }
        PyObject *k = PyTuple_GET_ITEM(t, 2), *v = PyTuple_GET_ITEM(t, 3);
        r.key = k == Py_None ? NULL : (const uint8_t *)PyBytes_AsString(k);
        r.key_len = k == Py_None ? 0 : PyBytes_Size(k);
        r.value = v == Py_None ? NULL : (const uint8_t *)PyBytes_AsString(v);
        r.value_len = v == Py_None ? 0 : PyBytes_Size(v);
        if (PyErr_Occurred())
            goto fail;
        r.tstype = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 5));
        r.epoch = -1;
        if (PyErr_Occurred())
            goto fail;
        r.headers = Py_NewRef(PyTuple_GET_ITEM(t, 4));
        if (!PyList_CheckExact(r.headers)) {
            Py_DECREF(r.headers);
            PyErr_SetString(PyExc_TypeError, "legacy headers must be a list");
            goto fail;
        }
        if (charge)
            s->budget_left -= (long long)r.key_len + (long long)r.value_len;
        /* key/value point into `got`, which stays alive until emit has copied them */
        if (emit(s, &r) < 0)
            goto fail;
    }
    Py_DECREF(got);
    return 0;
fail:
    Py_DECREF(got);
    return -1;
}

/* -- the decompression budget of decode_fetch / decode_columns ---------------------------------- */
/* A DecodeError raised by decompress() under a budget is raised again (same class) naming the
 * batch: records.py's _budget_error words it identically. */
static void budget_error(Py_ssize_t pos, int64_t base_offset, long long left)
{
    if (!PyErr_ExceptionMatches(g_decode_error))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyErr_Format(type, "record batch at offset %zd (base offset %lld), %lld bytes left of the "
                 "fetch's decompression budget: %S", pos, (long long)base_offset, left,
                 value ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* max_size of decode_fetch / decode_columns: an int (the budget of this call) or an object whose
 * `left` attribute is the budget, written back when the call ends (records.DecompressionBudget,
 * shared by the partitions of one Fetch response). */
static int budget_start(sink_t *s, PyObject *max_size)
{
    s->budgeted = 1;
    if (PyLong_Check(max_size)) {
        s->budget_left = PyLong_AsLongLong(max_size);
        return s->budget_left == -1 && PyErr_Occurred() ? -1 : 0;
    }
    PyObject *left = PyObject_GetAttrString(max_size, "left");
    if (!left)
        return -1;
    s->budget_left = PyLong_AsLongLong(left);
    Py_DECREF(left);
    if (s->budget_left == -1 && PyErr_Occurred())
        return -1;
    s->budget_obj = max_size;
    return 0;
}

static int budget_end(sink_t *s)
{
    if (!s->budget_obj)
        return 0;
    PyObject *exc_t, *exc_v, *exc_tb;
    PyErr_Fetch(&exc_t, &exc_v, &exc_tb);          /* keep the walk's error, if any */
    PyObject *left = PyLong_FromLongLong(s->budget_left);
    int rc = left ? PyObject_SetAttrString(s->budget_obj, "left", left) : -1;
    Py_XDECREF(left);
    if (exc_t) {
        if (rc < 0)
            PyErr_Clear();
        PyErr_Restore(exc_t, exc_v, exc_tb);
        return -1;
    }
    return rc;
}

/* -- the fetch payload walk (records.iter_records, step for step) ------------------------------- */
static int walk(sink_t *s, const uint8_t *d, Py_ssize_t n)
{
    Py_ssize_t pos = s->start;
    s->next = -1;
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "start position outside the buffer");
        return -1;
    }
    while (n - pos >= LOG_OVERHEAD) {
        if (s->max_records && PyList_GET_SIZE(s->out) >= s->max_records) {
            s->next = pos;                              /* chunk full: resume here */
            return 0;
        }
        int32_t length = be32(d + pos + 8);
        if (length >= 0 && (Py_ssize_t)length > n - pos - LOG_OVERHEAD)
            return 0;                                   /* partial trailing batch */
        if (length < LEGACY_MIN_LENGTH) {
            corrupt("entry at offset %zd declares length %d", pos, (int)length);
            return -1;
        }
        Py_ssize_t end = pos + LOG_OVERHEAD + length;
        if (d[pos + MAGIC_OFFSET] < 2) {
            if (legacy_entry(s, d, n, pos, end) < 0)
                return -1;
            pos = end;
            continue;
        }
        if (length < MIN_BATCH_LENGTH) {
            corrupt("record batch at offset %zd declares length %d < 49", pos, (int)length);
            return -1;
        }
        const uint8_t *h = d + pos;
        int64_t base_offset = be64(h);
        int32_t leader_epoch = be32(h + 12);
        int8_t magic = (int8_t)h[16];
        uint32_t crc = be32u(h + 17);
        int16_t attributes = be16(h + 21);
        int64_t base_ts = be64(h + 27);
        int64_t max_ts = be64(h + 35);
        int32_t count = be32(h + 57);
        if (magic != 2) {
            PyErr_Format(g_decode_error, "record batch at offset %zd has unknown magic %d", pos,
                         (int)magic);
            return -1;
        }
        if (s->check_crc) {
            uint32_t got = crc32c(0, d + pos + ATTRIBUTES_OFFSET, (size_t)(end - pos - ATTRIBUTES_OFFSET));
            if (got != crc) {
                corrupt("record batch at offset %zd: CRC-32C mismatch", pos);
                return -1;
            }
        }
        if (!(attributes & ATTR_CONTROL)) {
            int codec = attributes & ATTR_COMPRESSION_MASK;
            int lat = (attributes & ATTR_TIMESTAMP_TYPE) != 0;
            if (codec) {
                if (!s->src_view && !(s->src_view = PyMemoryView_FromObject(s->src)))
                    return -1;
                PyObject *slice = PySequence_GetSlice(s->src_view, pos + BATCH_HEADER_SIZE, end);
                if (!slice)
                    return -1;
                PyObject *limit = s->budgeted ? PyLong_FromLongLong(s->budget_left)
                                              : Py_NewRef(s->max_size);
                if (!limit) {
                    Py_DECREF(slice);
                    return -1;
                }
                PyObject *raw = PyObject_CallFunction(g_decompress, "iOO", codec, slice, limit);
                Py_DECREF(slice);
                Py_DECREF(limit);
                if (!raw) {
                    if (s->budgeted)
                        budget_error(pos, base_offset, s->budget_left);
                    return -1;
                }
                Py_buffer rb;
                if (PyObject_GetBuffer(raw, &rb, PyBUF_SIMPLE) < 0) {
                    Py_DECREF(raw);
                    return -1;
                }
                if (s->budgeted)
                    s->budget_left -= rb.len;
                int rc = decode_body(s, rb.buf, 0, rb.len, count, base_offset, base_ts, lat, max_ts,
                                     leader_epoch);
                PyBuffer_Release(&rb);
                Py_DECREF(raw);
                if (rc < 0)
                    return -1;
            } else if (decode_body(s, d, pos + BATCH_HEADER_SIZE, end, count, base_offset, base_ts,
                                   lat, max_ts, leader_epoch) < 0) {
                return -1;
            }
        }
        pos = end;
    }
    return 0;
}

/* -- argument plumbing -------------------------------------------------------------------------- */
static int configured(void)
{
    if (!g_decompress) {
        PyErr_SetString(PyExc_RuntimeError, "kohort.protocol._crecords: configure() was not called");
        return 0;
    }
    return 1;
}

static int opt_offset(PyObject *o, int *has, int64_t *v)
{
    if (o == NULL || o == Py_None) {
        *has = 0;
        return 0;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow) {
        needs_python("offset bound outside int64");
        return -1;
    }
    *has = 1;
    *v = x;
    return 0;
}

static void sink_free(sink_t *s)
{
    vec_t *vs[] = {&s->offsets, &s->timestamps, &s->tstypes, &s->key_valid, &s->key_offs,
                   &s->key_data, &s->val_valid, &s->val_offs, &s->val_data};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++)
        PyMem_Free(vs[i]->data);
    Py_XDECREF(s->out);
    Py_XDECREF(s->headers);
    Py_XDECREF(s->src_bytes);
    Py_XDECREF(s->src_view);
    Py_XDECREF(s->last_ts_obj);
}

static int run(sink_t *s, PyObject *buf)
{
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0)
        return -1;
    s->src = buf;
    int rc = walk(s, view.buf, view.len);
    /* the memoryview made for decompress must go before the buffer export is released */
    Py_CLEAR(s->src_view);
    PyBuffer_Release(&view);
    return rc;
}

/* Track again what emit() untracked, for the records that have headers: the record (a tuple or
 * tuple subclass) and its headers list at index `hi`. A record without headers holds only atomic
 * values and an empty list, and stays untracked with its list: tracked, the records of every
 * fetch would go through the collector's young generations (each scanned two or three times, then
 * by every full collection while the application holds them), which costs more than decoding
 * them. The price: a cycle made by putting a record inside its own (empty) headers list is never
 * collected, as for any untracked container (CPython untracks atomic tuples the same way). */
static void retrack(PyObject *out, Py_ssize_t hi)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(out); i++) {
        PyObject *item = PyList_GET_ITEM(out, i);
        PyObject *h = PyTuple_GET_ITEM(item, hi);
        if (PyList_CheckExact(h) && PyList_GET_SIZE(h) == 0)
            continue;
        if (!PyObject_GC_IsTracked(h))
            PyObject_GC_Track(h);
        if (!PyObject_GC_IsTracked(item))
            PyObject_GC_Track(item);
    }
}

static PyObject *py_decode_fetch(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buf", "check_crc", "max_size", "min_offset", "max_offset",
                             "record_factory", "prefix", "suffix", NULL};
    PyObject *buf, *max_size = NULL, *min_o = NULL, *max_o = NULL, *factory = NULL, *prefix = NULL;
    PyObject *suffix = NULL;
    int check_crc = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pOOOOOO:decode_fetch", kwlist, &buf, &check_crc,
                                     &max_size, &min_o, &max_o, &factory, &prefix, &suffix))
        return NULL;
    if (!configured())
        return NULL;
    sink_t s;
    memset(&s, 0, sizeof s);
    s.check_crc = check_crc;
    PyObject *default_max = NULL;
    if (!max_size || max_size == Py_None) {
        default_max = PyLong_FromLong(256L * 1024 * 1024);
        if (!default_max)
            return NULL;
        max_size = default_max;
    }
    s.max_size = max_size;
    if (budget_start(&s, max_size) < 0)
        goto fail;
    if (opt_offset(min_o, &s.has_min, &s.min_offset) < 0 ||
        opt_offset(max_o, &s.has_max, &s.max_offset) < 0)
        goto fail;
    if (factory && factory != Py_None) {
        s.mode = MODE_FACTORY;
        s.factory = factory;
        s.prefix = prefix && prefix != Py_None ? prefix : NULL;
        if (s.prefix && !PyTuple_Check(s.prefix)) {
            PyErr_SetString(PyExc_TypeError, "prefix must be a tuple");
            goto fail;
        }
        s.suffix = suffix && suffix != Py_None ? suffix : NULL;
        if (s.suffix && !PyTuple_Check(s.suffix)) {
            PyErr_SetString(PyExc_TypeError, "suffix must be a tuple");
            goto fail;
        }
        if ((s.prefix ? PyTuple_GET_SIZE(s.prefix) : 0) + (s.suffix ? PyTuple_GET_SIZE(s.suffix) : 0) > 25) {
            PyErr_SetString(PyExc_ValueError, "prefix and suffix may hold at most 25 fields together");
            goto fail;
        }
        if (PyType_Check(factory)) {
            PyTypeObject *tp = (PyTypeObject *)factory;
            s.factory_direct = tp != &PyTuple_Type && PyType_IsSubtype(tp, &PyTuple_Type) &&
                               tp->tp_basicsize == PyTuple_Type.tp_basicsize &&
                               tp->tp_itemsize == PyTuple_Type.tp_itemsize &&
                               tp->tp_dictoffset == 0 && tp->tp_weaklistoffset == 0;
        }
    } else if ((prefix && prefix != Py_None && PyObject_Length(prefix) != 0) ||
               (suffix && suffix != Py_None && PyObject_Length(suffix) != 0)) {
        PyErr_SetString(PyExc_TypeError, "prefix and suffix need a record_factory");
        goto fail;
    }
    if (!(s.out = PyList_New(0)))
        goto fail;
    int rc = run(&s, buf);
    if (budget_end(&s) < 0)
        rc = -1;
    if (s.mode == MODE_TUPLES || s.factory_direct)
        retrack(s.out, s.mode == MODE_TUPLES ? 4 : (s.prefix ? PyTuple_GET_SIZE(s.prefix) : 0) + 5);
    if (rc < 0)
        goto fail;
    PyObject *out = s.out;
    s.out = NULL;
    sink_free(&s);
    Py_XDECREF(default_max);
    return out;
fail:
    sink_free(&s);
    Py_XDECREF(default_max);
    return NULL;
}

static PyObject *py_decode_chunk(PyObject *self, PyObject *args)
{
    PyObject *buf, *max_size;
    Py_ssize_t start, max_records;
    int check_crc;
    if (!PyArg_ParseTuple(args, "OnpOn:decode_chunk", &buf, &start, &check_crc, &max_size,
                          &max_records))
        return NULL;
    if (!configured())
        return NULL;
    if (max_records < 1) {
        PyErr_SetString(PyExc_ValueError, "max_records must be positive");
        return NULL;
    }
    sink_t s;
    memset(&s, 0, sizeof s);
    s.check_crc = check_crc;
    s.max_size = max_size;
    s.start = start;
    s.max_records = max_records;
    PyObject *result = NULL;
    if ((s.out = PyList_New(0))) {
        int rc = run(&s, buf);
        retrack(s.out, 4);
        if (rc == 0)
            result = Py_BuildValue("(On)", s.out, s.next);
    }
    sink_free(&s);
    return result;
}

static PyObject *vec_bytes(vec_t *v)
{
    return PyBytes_FromStringAndSize(v->data ? v->data : "", v->len);
}

static PyObject *py_decode_columns(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buf", "check_crc", "max_size", "min_offset", "max_offset", NULL};
    PyObject *buf, *max_size = NULL, *min_o = NULL, *max_o = NULL;
    int check_crc = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pOOO:decode_columns", kwlist, &buf, &check_crc,
                                     &max_size, &min_o, &max_o))
        return NULL;
    if (!configured())
        return NULL;
    sink_t s;
    memset(&s, 0, sizeof s);
    s.mode = MODE_COLUMNS;
    s.check_crc = check_crc;
    PyObject *default_max = NULL, *result = NULL;
    if (!max_size || max_size == Py_None) {
        if (!(default_max = PyLong_FromLong(256L * 1024 * 1024)))
            return NULL;
        max_size = default_max;
    }
    s.max_size = max_size;
    int32_t zero = 0;
    if (budget_start(&s, max_size) < 0 ||
        opt_offset(min_o, &s.has_min, &s.min_offset) < 0 ||
        opt_offset(max_o, &s.has_max, &s.max_offset) < 0 ||
        vec_put(&s.key_offs, &zero, 4) < 0 || vec_put(&s.val_offs, &zero, 4) < 0)
        goto done;
    int rc = run(&s, buf);
    if (budget_end(&s) < 0 || rc < 0)
        goto done;
    /* (count, offsets, timestamps, timestamp_types, key_validity, key_offsets, key_data,
     *  value_validity, value_offsets, value_data, headers) */
    result = Py_BuildValue("(nNNNNNNNNNO)", s.n, vec_bytes(&s.offsets), vec_bytes(&s.timestamps),
                           vec_bytes(&s.tstypes), vec_bytes(&s.key_valid), vec_bytes(&s.key_offs),
                           vec_bytes(&s.key_data), vec_bytes(&s.val_valid), vec_bytes(&s.val_offs),
                           vec_bytes(&s.val_data), s.headers ? s.headers : Py_None);
done:
    sink_free(&s);
    Py_XDECREF(default_max);
    return result;
}

/* -- FetchCursor: decode_fetch in resumable steps ------------------------------------------------
 * FetchCursor(buf, check_crc, max_size, min_offset, max_offset, record_factory, prefix) walks a
 * fetch payload as decode_fetch does (same checks in the same order, same records, same budget),
 * but take(n) returns only the next n records kept and remembers where it stopped: the entry
 * position, and inside a batch the record index, the body position and the decompressed body
 * (each batch is decompressed once). The buffer stays exported while records are left. A legacy
 * (magic 0/1) entry raises NeedsPython, as do the int64 overflows decode_fetch hands to Python;
 * `resume` (entry position, records of that batch already read, budget left before its
 * decompression) is then where the take that raised began, for records.py's Python twin. Any
 * error ends the cursor. */
typedef struct {
    PyObject_HEAD
    sink_t s;
    PyObject *buf;              /* the payload object, exported into view while not done */
    Py_buffer view;
    PyObject *max_size;         /* int or DecompressionBudget */
    PyObject *factory, *prefix;
    Py_ssize_t pos;             /* next entry */
    Py_ssize_t batch_end;
    int in_batch;               /* inside a v2 data batch: the fields below are live */
    PyObject *raw;              /* decompressed body (bytes-like) or NULL: body in view */
    Py_buffer rb;
    const uint8_t *body;
    Py_ssize_t p, end;
    int32_t i, count;
    int64_t base_offset, base_ts, max_ts;
    int lat, epoch;
    Py_ssize_t resume_pos;      /* where the last take began */
    int32_t resume_i;
    long long resume_left;
    char done;
    char busy;                  /* inside take(): another take() (a record factory calling it, or another
                                 * thread while a CRC is checked without the GIL) is refused */
} FetchCursor;

static void cursor_drop_batch(FetchCursor *c)
{
    if (c->raw) {
        PyBuffer_Release(&c->rb);
        Py_CLEAR(c->raw);
    }
    c->in_batch = 0;
}

static void cursor_finish(FetchCursor *c)
{
    cursor_drop_batch(c);
    if (c->s.src) {
        Py_CLEAR(c->s.src_view);     /* before the buffer export it views is released */
        PyBuffer_Release(&c->view);
        c->s.src = NULL;
    }
    c->done = 1;
}

static int cursor_traverse(FetchCursor *c, visitproc visit, void *arg)
{
    Py_VISIT(c->buf);
    Py_VISIT(c->max_size);
    Py_VISIT(c->factory);
    Py_VISIT(c->prefix);
    return 0;
}

static int cursor_clear(FetchCursor *c)
{
    cursor_finish(c);
    c->s.factory = c->s.prefix = c->s.max_size = c->s.budget_obj = NULL;
    Py_CLEAR(c->buf);
    Py_CLEAR(c->max_size);
    Py_CLEAR(c->factory);
    Py_CLEAR(c->prefix);
    return 0;
}

static void cursor_dealloc(FetchCursor *c)
{
    PyTypeObject *tp = Py_TYPE(c);
    PyObject_GC_UnTrack(c);
    cursor_clear(c);
    sink_free(&c->s);
    tp->tp_free((PyObject *)c);
}

static int cursor_init(FetchCursor *c, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buf", "check_crc", "max_size", "min_offset", "max_offset",
                             "record_factory", "prefix", NULL};
    PyObject *buf, *max_size = NULL, *min_o = NULL, *max_o = NULL, *factory = NULL, *prefix = NULL;
    int check_crc = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pOOOOO:FetchCursor", kwlist, &buf, &check_crc,
                                     &max_size, &min_o, &max_o, &factory, &prefix))
        return -1;
    if (!configured())
        return -1;
    if (c->buf || c->max_size) {
        PyErr_SetString(PyExc_TypeError, "FetchCursor is initialised once");
        return -1;
    }
    sink_t *s = &c->s;
    s->check_crc = check_crc;
    if (!max_size || max_size == Py_None) {
        if (!(c->max_size = PyLong_FromLong(256L * 1024 * 1024)))
            return -1;
    } else {
        c->max_size = Py_NewRef(max_size);
    }
    s->max_size = c->max_size;
    if (budget_start(s, c->max_size) < 0 ||
        opt_offset(min_o, &s->has_min, &s->min_offset) < 0 ||
        opt_offset(max_o, &s->has_max, &s->max_offset) < 0)
        return -1;
    if (factory && factory != Py_None) {
        s->mode = MODE_FACTORY;
        c->factory = Py_NewRef(factory);
        s->factory = factory;
        if (prefix && prefix != Py_None) {
            if (!PyTuple_Check(prefix)) {
                PyErr_SetString(PyExc_TypeError, "prefix must be a tuple");
                return -1;
            }
            if (PyTuple_GET_SIZE(prefix) > 25) {
                PyErr_SetString(PyExc_ValueError, "prefix may hold at most 25 fields");
                return -1;
            }
            c->prefix = Py_NewRef(prefix);
            s->prefix = prefix;
        }
        if (PyType_Check(factory)) {
            PyTypeObject *tp = (PyTypeObject *)factory;
            s->factory_direct = tp != &PyTuple_Type && PyType_IsSubtype(tp, &PyTuple_Type) &&
                                tp->tp_basicsize == PyTuple_Type.tp_basicsize &&
                                tp->tp_itemsize == PyTuple_Type.tp_itemsize &&
                                tp->tp_dictoffset == 0 && tp->tp_weaklistoffset == 0;
        }
    } else if (prefix && prefix != Py_None && PyObject_Length(prefix) != 0) {
        PyErr_SetString(PyExc_TypeError, "prefix needs a record_factory");
        return -1;
    }
    if (PyObject_GetBuffer(buf, &c->view, PyBUF_SIMPLE) < 0)
        return -1;
    c->buf = Py_NewRef(buf);
    s->src = buf;
    return 0;
}

/* The walk of walk() and decode_body(), resumable: 0 at the payload's end, 1 when take_limit was
 * reached, -1 with an exception set. */
static int cursor_walk(FetchCursor *c)
{
    sink_t *s = &c->s;
    const uint8_t *d = c->view.buf;
    Py_ssize_t n = c->view.len;
    for (;;) {
        if (c->in_batch) {
            int rc = decode_records(s, c->body, &c->p, c->end, &c->i, c->count, c->base_offset,
                                    c->base_ts, c->lat, c->max_ts, c->epoch);
            if (rc != 0)
                return rc;
            cursor_drop_batch(c);
            c->pos = c->batch_end;
            c->i = 0;
            continue;
        }
        Py_ssize_t pos = c->pos;
        if (n - pos < LOG_OVERHEAD)
            return 0;
        int32_t length = be32(d + pos + 8);
        if (length >= 0 && (Py_ssize_t)length > n - pos - LOG_OVERHEAD)
            return 0;                                   /* partial trailing batch */
        if (length < LEGACY_MIN_LENGTH) {
            corrupt("entry at offset %zd declares length %d", pos, (int)length);
            return -1;
        }
        Py_ssize_t end = pos + LOG_OVERHEAD + length;
        if (d[pos + MAGIC_OFFSET] < 2) {
            needs_python("legacy entry: read by the Python decoder");
            return -1;
        }
        if (length < MIN_BATCH_LENGTH) {
            corrupt("record batch at offset %zd declares length %d < 49", pos, (int)length);
            return -1;
        }
        const uint8_t *h = d + pos;
        int8_t magic = (int8_t)h[16];
        uint32_t crc = be32u(h + 17);
        int16_t attributes = be16(h + 21);
        if (magic != 2) {
            PyErr_Format(g_decode_error, "record batch at offset %zd has unknown magic %d", pos,
                         (int)magic);
            return -1;
        }
        if (s->check_crc) {
            /* take() is busy meanwhile: another thread's take() on this cursor is refused */
            uint32_t got = crc32c_exported(d + pos + ATTRIBUTES_OFFSET, (size_t)(end - pos - ATTRIBUTES_OFFSET));
            if (got != crc) {
                corrupt("record batch at offset %zd: CRC-32C mismatch", pos);
                return -1;
            }
        }
        c->batch_end = end;
        c->i = 0;
        if (attributes & ATTR_CONTROL) {
            c->pos = end;
            continue;
        }
        c->base_offset = be64(h);
        c->epoch = be32(h + 12);
        c->base_ts = be64(h + 27);
        c->max_ts = be64(h + 35);
        c->count = be32(h + 57);
        c->lat = (attributes & ATTR_TIMESTAMP_TYPE) != 0;
        int codec = attributes & ATTR_COMPRESSION_MASK;
        if (codec) {
            if (!s->src_view && !(s->src_view = PyMemoryView_FromObject(s->src)))
                return -1;
            PyObject *slice = PySequence_GetSlice(s->src_view, pos + BATCH_HEADER_SIZE, end);
            if (!slice)
                return -1;
            PyObject *limit = PyLong_FromLongLong(s->budget_left);
            if (!limit) {
                Py_DECREF(slice);
                return -1;
            }
            PyObject *raw = PyObject_CallFunction(g_decompress, "iOO", codec, slice, limit);
            Py_DECREF(slice);
            Py_DECREF(limit);
            if (!raw) {
                budget_error(pos, c->base_offset, s->budget_left);
                return -1;
            }
            if (PyObject_GetBuffer(raw, &c->rb, PyBUF_SIMPLE) < 0) {
                Py_DECREF(raw);
                return -1;
            }
            c->raw = raw;
            s->budget_left -= c->rb.len;
            c->body = c->rb.buf;
            c->p = 0;
            c->end = c->rb.len;
        } else {
            c->body = d;
            c->p = pos + BATCH_HEADER_SIZE;
            c->end = end;
        }
        c->in_batch = 1;
        if (c->count < 0 || c->count > (c->end - c->p) / MIN_RECORD_SIZE) {
            corrupt("records count %d cannot fit in %zd bytes", (int)c->count, c->end - c->p);
            return -1;
        }
    }
}

static PyObject *cursor_take(FetchCursor *c, PyObject *arg)
{
    Py_ssize_t limit = PyLong_AsSsize_t(arg);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    if (limit < 1) {
        PyErr_SetString(PyExc_ValueError, "take() needs max_records >= 1");
        return NULL;
    }
    sink_t *s = &c->s;
    if (c->done)
        return PyList_New(0);
    if (!c->buf) {
        PyErr_SetString(PyExc_TypeError, "FetchCursor was not initialised");
        return NULL;
    }
    if (c->busy) {
        PyErr_SetString(PyExc_RuntimeError, "FetchCursor.take() called while a take() runs (from inside it, "
                        "or from another thread while it checks a CRC)");
        return NULL;
    }
    if (s->budget_obj) {          /* the shared budget may have been spent by other decodes since */
        PyObject *left = PyObject_GetAttrString(s->budget_obj, "left");
        if (!left)
            return NULL;
        s->budget_left = PyLong_AsLongLong(left);
        Py_DECREF(left);
        if (s->budget_left == -1 && PyErr_Occurred())
            return NULL;
    }
    c->resume_pos = c->pos;
    c->resume_i = c->in_batch ? c->i : 0;
    c->resume_left = s->budget_left + (c->in_batch && c->raw ? (long long)c->rb.len : 0);
    if (!(s->out = PyList_New(0)))
        return NULL;
    s->take_limit = limit;
    c->busy = 1;
    int rc = cursor_walk(c);
    c->busy = 0;
    if (budget_end(s) < 0)
        rc = -1;
    if (s->mode == MODE_TUPLES || s->factory_direct)
        retrack(s->out, s->mode == MODE_TUPLES ? 4 : (s->prefix ? PyTuple_GET_SIZE(s->prefix) : 0) + 5);
    PyObject *out = s->out;
    s->out = NULL;
    if (rc <= 0)
        cursor_finish(c);
    if (rc < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *cursor_get_done(FetchCursor *c, void *closure)
{
    return PyBool_FromLong(c->done);
}

static PyObject *cursor_get_resume(FetchCursor *c, void *closure)
{
    return Py_BuildValue("(niL)", c->resume_pos, (int)c->resume_i, c->resume_left);
}

static PyMethodDef cursor_methods[] = {
    {"take", (PyCFunction)cursor_take, METH_O,
     "take(max_records) -> the next records kept (at most max_records; [] once done)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef cursor_getset[] = {
    {"done", (getter)cursor_get_done, NULL, "True once the payload is read (or a take failed).", NULL},
    {"resume", (getter)cursor_get_resume, NULL,
     "(entry position, records of its batch read before, budget left before its decompression) "
     "where the last take began.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FetchCursor_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kohort.protocol._crecords.FetchCursor",
    .tp_basicsize = sizeof(FetchCursor),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "FetchCursor(buf, check_crc=False, max_size=None, min_offset=None, max_offset=None, "
              "record_factory=None, prefix=()): decode_fetch's records in steps (take).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)cursor_init,
    .tp_dealloc = (destructor)cursor_dealloc,
    .tp_traverse = (traverseproc)cursor_traverse,
    .tp_clear = (inquiry)cursor_clear,
    .tp_methods = cursor_methods,
    .tp_getset = cursor_getset,
};

static PyObject *py_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer b;
    unsigned long crc = 0;
    if (!PyArg_ParseTuple(args, "y*|k:crc32c", &b, &crc))
        return NULL;
    uint32_t r;
    Py_BEGIN_ALLOW_THREADS
    r = crc32c((uint32_t)crc, b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(r);
}

static PyObject *py_check_batch(PyObject *self, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t pos = 0;
    if (!PyArg_ParseTuple(args, "y*|n:check_batch", &b, &pos))
        return NULL;
    const uint8_t *d = b.buf;
    PyObject *out = NULL;
    if (pos < 0 || b.len - pos < BATCH_HEADER_SIZE)
        goto none;
    const uint8_t *h = d + pos;
    int32_t length = be32(h + 8);
    if (h[MAGIC_OFFSET] != 2 || length < MIN_BATCH_LENGTH || (Py_ssize_t)length > b.len - pos - LOG_OVERHEAD)
        goto none;
    int32_t count = be32(h + 57);
    uint32_t stored = be32u(h + 17);
    if (count < 0 || crc32c(0, h + ATTRIBUTES_OFFSET, (size_t)(length + LOG_OVERHEAD - ATTRIBUTES_OFFSET)) != stored)
        goto none;
    out = Py_BuildValue("(LiiBkhiLLLhii)", (long long)be64(h), length, be32(h + 12), (unsigned char)h[16],
                        (unsigned long)stored, be16(h + 21), be32(h + 23), (long long)be64(h + 27),
                        (long long)be64(h + 35), (long long)be64(h + 43), be16(h + 51), be32(h + 53), count);
    PyBuffer_Release(&b);
    return out;
none:
    PyBuffer_Release(&b);
    Py_RETURN_NONE;
}

static PyObject *py_configure(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"decode_error", "corrupt_error", "decompress", "legacy", NULL};
    PyObject *de, *ce, *dc, *lg;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO:configure", kwlist, &de, &ce, &dc, &lg))
        return NULL;
    if (!PyExceptionClass_Check(de) || !PyExceptionClass_Check(ce) ||
        !PyObject_IsSubclass(ce, de) || !PyCallable_Check(dc) || !PyCallable_Check(lg)) {
        PyErr_SetString(PyExc_TypeError,
                        "configure(DecodeError, CorruptRecordError(DecodeError), decompress, legacy)");
        return NULL;
    }
    Py_XSETREF(g_decode_error, Py_NewRef(de));
    Py_XSETREF(g_corrupt_error, Py_NewRef(ce));
    Py_XSETREF(g_decompress, Py_NewRef(dc));
    Py_XSETREF(g_legacy, Py_NewRef(lg));
    Py_RETURN_NONE;
}

/* == the producer's per-record hot path ========================================================== */
/* RecordBuffer: what a batch being filled holds (base of accumulator.ProducerBatch); RecordFuture:
 * one record's place in it (base of accumulator.DeliveryFuture); FastProduce: Producer.produce's
 * common case. The Python classes in accumulator.py / producer.py are the reference; these must
 * encode byte for byte what ProducerBatch.try_append encodes, and fall back to Python for every
 * case they do not handle. */

typedef struct {
    PyObject_HEAD
    PyObject *buf;              /* bytearray: the encoded records (None once done) */
    Py_ssize_t count;
    long long base_ts, max_ts;
    Py_ssize_t size_limit;      /* room reserved so far: a record past it is not appended */
    Py_ssize_t cap;             /* batch.size: closed once nearly this large (0: size_limit) */
    char closed;
    PyObject *ts_list;          /* per-record timestamps once they differ from base_ts, else None */
} RecordBuffer;

static int rb_traverse(RecordBuffer *self, visitproc visit, void *arg)
{
    Py_VISIT(self->buf);
    Py_VISIT(self->ts_list);
    return 0;
}

static int rb_clear(RecordBuffer *self)
{
    Py_CLEAR(self->buf);
    Py_CLEAR(self->ts_list);
    return 0;
}

static void rb_dealloc(RecordBuffer *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    rb_clear(self);
    tp->tp_free((PyObject *)self);
}

static PyObject *rb_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    RecordBuffer *self = (RecordBuffer *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->buf = Py_NewRef(Py_None);
    self->ts_list = Py_NewRef(Py_None);
    self->base_ts = self->max_ts = -1;
    return (PyObject *)self;
}

static PyMemberDef rb_members[] = {
    {"buf", T_OBJECT, offsetof(RecordBuffer, buf), 0, "the encoded records (bytearray)"},
    {"count", T_PYSSIZET, offsetof(RecordBuffer, count), 0, "records appended"},
    {"base_ts", T_LONGLONG, offsetof(RecordBuffer, base_ts), 0, "the first record's timestamp"},
    {"max_ts", T_LONGLONG, offsetof(RecordBuffer, max_ts), 0, "the largest timestamp"},
    {"size_limit", T_PYSSIZET, offsetof(RecordBuffer, size_limit), 0, "room reserved so far"},
    {"cap", T_PYSSIZET, offsetof(RecordBuffer, cap), 0, "batch.size: closed once nearly this large"},
    {"closed", T_BOOL, offsetof(RecordBuffer, closed), 0, "no more records go in"},
    {"ts_list", T_OBJECT, offsetof(RecordBuffer, ts_list), 0, "per-record timestamps or None"},
    {NULL},
};

static int rb_append(RecordBuffer *rb, PyObject *key, PyObject *value, long long ts, Py_ssize_t *delta);

/* RecordBuffer.append_raw(key, value, ts): the C append for a record of bytes (key may be None),
 * without headers: its offset delta, or None where Python's try_append must take it (no room, an
 * odd shape or odd types; nothing changed). */
static PyObject *rb_append_method(RecordBuffer *self, PyObject *args)
{
    PyObject *key, *value;
    long long ts;
    if (!PyArg_ParseTuple(args, "OOL:append_raw", &key, &value, &ts))
        return NULL;
    if ((key != Py_None && !PyBytes_CheckExact(key)) || !PyBytes_CheckExact(value))
        Py_RETURN_NONE;
    Py_ssize_t delta = 0;
    int r = rb_append(self, key == Py_None ? NULL : key, value, ts, &delta);
    if (r < 0)
        return NULL;
    if (r != 1)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(delta);
}

static PyMethodDef rb_methods[] = {
    {"append_raw", (PyCFunction)rb_append_method, METH_VARARGS,
     "append_raw(key, value, ts) -> offset delta, or None where Python's try_append must append."},
    {NULL},
};

/* recycle_buffer(buf, room) -> bool: make a finished batch's bytearray `room` zero bytes long again,
 * keeping its allocation (and its pages) for the next batch; False (nothing changed) where it is not
 * a plain bytearray of at least that allocation or anything still holds a view of it. */
static PyObject *py_recycle_buffer(PyObject *self, PyObject *args)
{
    PyObject *buf;
    Py_ssize_t room;
    if (!PyArg_ParseTuple(args, "On:recycle_buffer", &buf, &room))
        return NULL;
    if (!PyByteArray_CheckExact(buf) || room < 0)
        Py_RETURN_FALSE;
    PyByteArrayObject *ba = (PyByteArrayObject *)buf;
    if (ba->ob_exports != 0 || ba->ob_start != ba->ob_bytes || ba->ob_bytes == NULL || room >= ba->ob_alloc)
        Py_RETURN_FALSE;
    memset(ba->ob_bytes, 0, (size_t)room + 1);
    Py_SET_SIZE(ba, room);
    Py_RETURN_TRUE;
}

static PyTypeObject RecordBuffer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kohort.protocol._crecords.RecordBuffer",
    .tp_basicsize = sizeof(RecordBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The records of a producer batch being filled (base of accumulator.ProducerBatch).",
    .tp_traverse = (traverseproc)rb_traverse,
    .tp_clear = (inquiry)rb_clear,
    .tp_dealloc = (destructor)rb_dealloc,
    .tp_new = rb_new,
    .tp_members = rb_members,
    .tp_methods = rb_methods,
};

static inline int zz_len(uint64_t v)
{
    int n = 1;
    while (v > 0x7F) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint64_t zz64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline char *put_varint(char *p, uint64_t v)
{
    while (v > 0x7F) {
        *p++ = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

/* Make room in a batch's bytearray for `need` bytes ahead of its size: its allocation doubles (up
 * to `limit`, the room the batch has reserved) where bytearray grows by an eighth, so a batch filled
 * to 1 MB is reallocated -- and possibly copied by realloc -- about 6 times instead of about 35.
 * The caller then resizes to `need`, a downsize bytearray does in place (need >= half the new
 * allocation). */
static int rb_reserve(PyObject *buf, Py_ssize_t need, Py_ssize_t limit)
{
    PyByteArrayObject *ba = (PyByteArrayObject *)buf;
    if (ba->ob_start != ba->ob_bytes || need < ba->ob_alloc)
        return 0;                               /* room already (ob_alloc counts the trailing NUL) */
    Py_ssize_t target = 2 * need - 2;           /* allocated target + 1: need stays >= half of it */
    if (target > limit)
        target = limit;
    if (target <= need)
        return 0;                               /* the plain resize is as good */
    return PyByteArray_Resize(buf, target);
}

/* Set a batch's bytearray to `size` bytes. Within its allocation the size is set in place:
 * PyByteArray_Resize would give back most of a recycled buffer's allocation (it shrinks any
 * bytearray to less than half its allocation), which is what recycling keeps. Elsewhere, and while
 * the bytearray is exported (where the resize raises BufferError), PyByteArray_Resize. */
static int rb_set_size(PyObject *buf, Py_ssize_t size)
{
    PyByteArrayObject *ba = (PyByteArrayObject *)buf;
    if (ba->ob_exports == 0 && ba->ob_start == ba->ob_bytes && size >= Py_SIZE(ba) && size < ba->ob_alloc) {
        Py_SET_SIZE(ba, size);
        ba->ob_bytes[size] = '\0';
        return 0;
    }
    return PyByteArray_Resize(buf, size);
}

/* Append one record without headers (key/value: pointer and length, NULL for null) as
 * ProducerBatch.try_append does: 1 appended (*delta set), 2 no room left in the batch's reservation,
 * 0 a record Python encodes (nothing changed either way), -1 error. */
static int rb_append_raw(RecordBuffer *rb, const char *key, Py_ssize_t kl, const char *value, Py_ssize_t vl,
                         long long ts, Py_ssize_t *delta)
{
    if (!PyByteArray_CheckExact(rb->buf))
        return 0;                               /* done or odd: Python handles it */
    Py_ssize_t n = rb->count;
    long long tsd = n == 0 ? 0 : ts - rb->base_ts;
    if (n && (tsd > INT64_MAX / 4 || tsd < INT64_MIN / 4))
        return 0;                               /* huge deltas: Python's unbounded ints */
    if (!key)
        kl = 0;
    if (!value)
        vl = 0;
    uint64_t zts = zz64(tsd), zoff = zz64(n);
    Py_ssize_t body = 1 + zz_len(zts) + zz_len(zoff) + (key ? zz_len(zz64(kl)) + kl : 1)
                      + (value ? zz_len(zz64(vl)) + vl : 1) + 1;
    if (body > INT32_MAX)
        return 0;                               /* Python raises its EncodeError */
    Py_ssize_t total = zz_len(zz64(body)) + body;
    Py_ssize_t used = PyByteArray_GET_SIZE(rb->buf);
    if (n && BATCH_HEADER_SIZE + used + total > rb->size_limit)
        return 2;
    if (tsd != 0 && rb->ts_list == Py_None) {   /* timestamps differ from now on: keep them all */
        PyObject *tl = PyList_New(n);
        if (!tl)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *t = PyLong_FromLongLong(rb->base_ts);
            if (!t) {
                Py_DECREF(tl);
                return -1;
            }
            PyList_SET_ITEM(tl, i, t);
        }
        Py_SETREF(rb->ts_list, tl);
    }
    if (rb->ts_list != Py_None) {
        PyObject *t = PyLong_FromLongLong(ts);
        if (!t)
            return -1;
        int rc = PyList_Append(rb->ts_list, t);
        Py_DECREF(t);
        if (rc < 0)
            return -1;
    }
    if (rb_reserve(rb->buf, used + total, rb->size_limit - BATCH_HEADER_SIZE) < 0 ||
        rb_set_size(rb->buf, used + total) < 0) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (PyByteArray_GET_SIZE(rb->buf) != used && PyByteArray_Resize(rb->buf, used) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        if (rb->ts_list != Py_None)
            PyList_SetSlice(rb->ts_list, n, n + 1, NULL);
        return -1;
    }
    char *p = PyByteArray_AS_STRING(rb->buf) + used;
    p = put_varint(p, zz64(body));
    *p++ = 0;                                   /* attributes */
    p = put_varint(p, zts);
    p = put_varint(p, zoff);
    if (key) {
        p = put_varint(p, zz64(kl));
        memcpy(p, key, (size_t)kl);
        p += kl;
    } else {
        *p++ = 1;                               /* -1: null */
    }
    if (value) {
        p = put_varint(p, zz64(vl));
        memcpy(p, value, (size_t)vl);
        p += vl;
    } else {
        *p++ = 1;
    }
    *p++ = 0;                                   /* no headers */
    if (n == 0)
        rb->base_ts = rb->max_ts = ts;
    else if (ts > rb->max_ts)
        rb->max_ts = ts;
    rb->count = n + 1;
    if (used + total + 64 >= (rb->cap > 0 ? rb->cap : rb->size_limit))
        rb->closed = 1;
    *delta = n;
    return 1;
}

static int rb_append(RecordBuffer *rb, PyObject *key, PyObject *value, long long ts, Py_ssize_t *delta)
{
    return rb_append_raw(rb, key ? PyBytes_AS_STRING(key) : NULL, key ? PyBytes_GET_SIZE(key) : 0,
                         value ? PyBytes_AS_STRING(value) : NULL, value ? PyBytes_GET_SIZE(value) : 0, ts, delta);
}

typedef struct {
    PyObject_HEAD
    PyObject *batch;
    Py_ssize_t delta;
    PyObject *callbacks;        /* list of fn(future) or None */
} RecordFuture;

static int rf_traverse(RecordFuture *self, visitproc visit, void *arg)
{
    Py_VISIT(self->batch);
    Py_VISIT(self->callbacks);
    return 0;
}

static int rf_clear(RecordFuture *self)
{
    Py_CLEAR(self->batch);
    Py_CLEAR(self->callbacks);
    return 0;
}

static void rf_dealloc(RecordFuture *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    rf_clear(self);
    tp->tp_free((PyObject *)self);
}

static int rf_init(RecordFuture *self, PyObject *args, PyObject *kw)
{
    PyObject *batch;
    Py_ssize_t delta;
    static char *kwlist[] = {"batch", "delta", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "On", kwlist, &batch, &delta))
        return -1;
    Py_XSETREF(self->batch, Py_NewRef(batch));
    self->delta = delta;
    Py_XSETREF(self->callbacks, Py_NewRef(Py_None));
    return 0;
}

static PyMemberDef rf_members[] = {
    {"batch", T_OBJECT, offsetof(RecordFuture, batch), 0, "the record's batch"},
    {"delta", T_PYSSIZET, offsetof(RecordFuture, delta), 0, "the record's offset delta"},
    {"callbacks", T_OBJECT, offsetof(RecordFuture, callbacks), 0, "done callbacks or None"},
    {NULL},
};

static PyTypeObject RecordFuture_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kohort.protocol._crecords.RecordFuture",
    .tp_basicsize = sizeof(RecordFuture),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One produced record's place in its batch (base of accumulator.DeliveryFuture).",
    .tp_traverse = (traverseproc)rf_traverse,
    .tp_clear = (inquiry)rf_clear,
    .tp_dealloc = (destructor)rf_dealloc,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)rf_init,
    .tp_members = rf_members,
};

/* Kafka's murmur2 (Utils.murmur2), as partitioner.murmur2 computes it, as unsigned bits. */
static uint32_t murmur2(const uint8_t *d, Py_ssize_t len)
{
    const uint32_t m = 0x5BD1E995u;
    uint32_t h = 0x9747B28Cu ^ (uint32_t)len;
    Py_ssize_t n4 = len >> 2;
    for (Py_ssize_t i = 0; i < n4; i++) {
        uint32_t k = (uint32_t)d[4 * i] | ((uint32_t)d[4 * i + 1] << 8) | ((uint32_t)d[4 * i + 2] << 16) |
                     ((uint32_t)d[4 * i + 3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    const uint8_t *t = d + (n4 << 2);
    switch (len & 3) {
    case 3: h ^= (uint32_t)t[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)t[1] << 8;  /* fall through */
    case 1: h ^= t[0]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static PyObject *py_murmur2(PyObject *self, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t h = murmur2(b.buf, b.len);
    PyBuffer_Release(&b);
    return PyLong_FromLong((long)(int32_t)h);
}

enum { A_TOPIC, A_VALUE, A_KEY, A_HEADERS, A_PARTITION, A_TIMESTAMP, A_ON_DELIVERY, N_ARGS };
static const char *arg_names[N_ARGS] = {"topic", "value", "key", "headers", "partition", "timestamp",
                                        "on_delivery"};
static PyObject *arg_strs[N_ARGS];
static PyObject *s_closed, *s_fatal, *s_topics, *s_error, *s_num_partitions;
static int sealer_has_done(PyObject *o);       /* the native sealer's, at the end of this file */
static int is_native_sealer(PyObject *o);
/* The least time between two pokes for finished batches of the native sealer (while the I/O side
   is busy with the first, the records that follow do not each poke again). */
#define SEALED_POKE_NS 50000LL

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *producer, *sender, *net;          /* checked each call: _closed, fatal, fatal */
    PyObject *batches;                          /* acc.batches: (topic, partition) -> deque */
    PyObject *acquire, *release;                /* acc.lock's bound methods */
    PyObject *sticky;                           /* topic -> current sticky partition */
    PyObject *future_type;                      /* DeliveryFuture */
    PyObject *fallback;                         /* the Python produce (bound) */
    PyObject *on_full;                          /* fn(topic, partition, sticky) once a batch fills */
    PyObject *grow;                             /* fn(batch, record size) -> bool, under acc.lock: more of
                                                   buffer.memory for an open batch out of room (the
                                                   accumulator's _grow), or None */
    int hash_keys;                              /* 1: keyed records go by murmur2; 0: every record is
                                                   sticky (partitioner.ignore.keys); -1: a custom
                                                   partitioner (always Python) */
    Py_ssize_t max_record;
    PyObject *on_tick;                          /* fn() at most every tick_ns while records come (the
                                                   producing thread drives the I/O), or None */
    long long tick_ns, next_tick_ns;
    PyObject *txn_sendable;                     /* a transactional producer's TransactionManager.sendable
                                                   (a set of (topic, partition) taken as is), or None */
    PyObject *sealer;                           /* the producer's NativeSealer, or None: on_tick runs
                                                   early (at most every SEALED_POKE_NS) once it has
                                                   finished batches, so that their request leaves now
                                                   rather than at the next tick */
    long long next_sealed_ns;
    /* what the last call looked up, reused while the same objects come again: producer._topics (a
       dict replaced whole on every metadata change, never changed in place) and the topic -> its
       partition count; (topic, partition) -> its deque in acc.batches (never replaced once made:
       RecordAccumulator keeps a deque that emptied) */
    PyObject *c_topics, *c_topic, *c_dq_topic, *c_dq;
    Py_ssize_t c_n, c_dq_part;
} FastProduce;

static int fp_traverse(FastProduce *self, visitproc visit, void *arg)
{
    Py_VISIT(self->producer);
    Py_VISIT(self->sender);
    Py_VISIT(self->net);
    Py_VISIT(self->batches);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->sticky);
    Py_VISIT(self->future_type);
    Py_VISIT(self->fallback);
    Py_VISIT(self->on_full);
    Py_VISIT(self->grow);
    Py_VISIT(self->on_tick);
    Py_VISIT(self->txn_sendable);
    Py_VISIT(self->sealer);
    Py_VISIT(self->c_topics);
    Py_VISIT(self->c_topic);
    Py_VISIT(self->c_dq_topic);
    Py_VISIT(self->c_dq);
    return 0;
}

static int fp_clear(FastProduce *self)
{
    Py_CLEAR(self->producer);
    Py_CLEAR(self->sender);
    Py_CLEAR(self->net);
    Py_CLEAR(self->batches);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->sticky);
    Py_CLEAR(self->future_type);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->on_full);
    Py_CLEAR(self->grow);
    Py_CLEAR(self->on_tick);
    Py_CLEAR(self->txn_sendable);
    Py_CLEAR(self->sealer);
    Py_CLEAR(self->c_topics);
    Py_CLEAR(self->c_topic);
    Py_CLEAR(self->c_dq_topic);
    Py_CLEAR(self->c_dq);
    return 0;
}

static void fp_dealloc(FastProduce *self)
{
    PyObject_GC_UnTrack(self);
    fp_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* 1 when attribute `name` of `o` is set (not None / truthy), 0 when not, -1 on error */
static int attr_truthy(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v)
        return -1;
    int r = v == Py_None ? 0 : PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* Binds a vectorcall's positional and keyword arguments to `a[0..n)` by the names `strs` (None counts
   as absent: NULL). 0 when bound; 1 when the call is not one the compiled path takes (too many arguments,
   an unknown or repeated keyword): the caller then falls back to Python, which reports any TypeError. */
static int bind_args(PyObject *const *args, size_t nargsf, PyObject *kwnames, PyObject *const *strs, int n,
                     PyObject **a)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs > n)
        return 1;
    for (Py_ssize_t i = 0; i < nargs; i++)
        a[i] = args[i];
    if (kwnames) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t j = 0; j < nk; j++) {
            PyObject *k = PyTuple_GET_ITEM(kwnames, j);
            int found = -1;
            for (int i = 0; i < n && found < 0; i++)
                if (k == strs[i])
                    found = i;
            for (int i = 0; i < n && found < 0; i++)
                if (PyUnicode_Compare(k, strs[i]) == 0)
                    found = i;
            if (found < 0 || a[found])
                return 1;
            a[found] = args[nargs + j];
        }
    }
    for (int i = 0; i < n; i++)
        if (a[i] == Py_None)
            a[i] = NULL;
    return 0;
}

static PyObject *fp_call(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastProduce *self = (FastProduce *)callable;
    PyObject *a[N_ARGS] = {NULL};
    if (bind_args(args, nargsf, kwnames, arg_strs, N_ARGS, a))
        goto fallback;
    PyObject *topic = a[A_TOPIC], *value = a[A_VALUE], *key = a[A_KEY];
    if (!topic || !PyUnicode_CheckExact(topic) || a[A_HEADERS] || a[A_ON_DELIVERY] ||
        (value && !PyBytes_CheckExact(value)) || (key && !PyBytes_CheckExact(key)))
        goto fallback;
    if ((value ? PyBytes_GET_SIZE(value) : 0) + (key ? PyBytes_GET_SIZE(key) : 0) > self->max_record)
        goto fallback;
    int r;
    if ((r = attr_truthy(self->producer, s_closed)) != 0 || (r = attr_truthy(self->sender, s_fatal)) != 0 ||
        (r = attr_truthy(self->net, s_fatal)) != 0) {
        if (r < 0)
            return NULL;
        goto fallback;
    }
    PyObject *topics = PyObject_GetAttr(self->producer, s_topics);
    if (!topics)
        return NULL;
    Py_ssize_t n = -1;
    if (topics == self->c_topics && topic == self->c_topic) {
        n = self->c_n;                      /* the same metadata, the same topic as last time */
        Py_DECREF(topics);
    } else {
        PyObject *info = PyDict_Check(topics) ? PyDict_GetItemWithError(topics, topic) : NULL;
        Py_XINCREF(info);
        if (!info) {
            Py_DECREF(topics);
            if (PyErr_Occurred())
                return NULL;
            goto fallback;
        }
        if ((r = attr_truthy(info, s_error)) == 0) {
            PyObject *np = PyObject_GetAttr(info, s_num_partitions);
            n = np ? PyLong_AsSsize_t(np) : -1;
            Py_XDECREF(np);
        }
        Py_DECREF(info);
        if (r < 0 || PyErr_Occurred()) {
            Py_DECREF(topics);
            return NULL;
        }
        if (r > 0 || n <= 0) {
            Py_DECREF(topics);
            goto fallback;
        }
        Py_XSETREF(self->c_topics, topics);     /* the reference taken above */
        Py_XSETREF(self->c_topic, Py_NewRef(topic));
        self->c_n = n;
    }
    Py_ssize_t partition;
    int sticky = 0;
    if (a[A_PARTITION]) {
        if (!PyLong_CheckExact(a[A_PARTITION]))
            goto fallback;
        partition = PyLong_AsSsize_t(a[A_PARTITION]);
        if (partition == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto fallback;
        }
        if (partition < 0 || partition >= n)
            goto fallback;                  /* Python raises the clear error */
    } else if (self->hash_keys < 0) {
        goto fallback;                      /* a custom partitioner */
    } else if (key && self->hash_keys) {
        partition = (Py_ssize_t)(murmur2((const uint8_t *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
                                 & 0x7FFFFFFFu) % n;
    } else {                                /* null key, or partitioner.ignore.keys: sticky (KIP-480) */
        PyObject *sp = PyDict_GetItemWithError(self->sticky, topic);
        if (!sp) {
            if (PyErr_Occurred())
                return NULL;
            goto fallback;
        }
        partition = PyLong_AsSsize_t(sp);
        if (partition == -1 && PyErr_Occurred())
            return NULL;
        if (partition < 0 || partition >= n)
            goto fallback;
        sticky = 1;
    }
    long long ts;
    if (a[A_TIMESTAMP]) {
        if (!PyLong_CheckExact(a[A_TIMESTAMP]))
            goto fallback;
        int overflow;
        ts = PyLong_AsLongLongAndOverflow(a[A_TIMESTAMP], &overflow);
        if (overflow || (ts == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            goto fallback;
        }
    } else {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        ts = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    }
    PyObject *tp = NULL;
    if (self->txn_sendable != Py_None || topic != self->c_dq_topic || partition != self->c_dq_part) {
        PyObject *pp = PyLong_FromSsize_t(partition);
        if (!pp)
            return NULL;
        tp = PyTuple_Pack(2, topic, pp);
        Py_DECREF(pp);
        if (!tp)
            return NULL;
    }
    if (self->txn_sendable != Py_None) {    /* a transaction: only partitions it already holds */
        int ok = PySet_Contains(self->txn_sendable, tp);
        if (ok <= 0) {
            Py_DECREF(tp);
            if (ok < 0)
                return NULL;
            goto fallback;                  /* Python adds the partition, or raises */
        }
    }
    PyObject *dq;
    if (topic == self->c_dq_topic && partition == self->c_dq_part) {
        dq = self->c_dq;
        Py_XDECREF(tp);
    } else {
        dq = PyDict_GetItemWithError(self->batches, tp);     /* read without acc.lock, under the GIL:
                                                               a key, once there, keeps its deque */
        Py_DECREF(tp);
        if (!dq) {
            if (PyErr_Occurred())
                return NULL;
            goto fallback;                  /* no batch for it yet: Python opens one */
        }
        Py_XSETREF(self->c_dq_topic, Py_NewRef(topic));
        Py_XSETREF(self->c_dq, Py_NewRef(dq));
        self->c_dq_part = partition;
    }
    /* blocking: while the I/O side holds acc.lock this waits for it, as the Python produce would */
    PyObject *got = PyObject_CallNoArgs(self->acquire);
    if (!got)
        return NULL;
    Py_DECREF(got);
    PyObject *last = NULL;
    Py_ssize_t delta = -1;
    int appended = 0;
    {
        Py_ssize_t len = PyObject_Length(dq);
        if (len > 0)
            last = PySequence_GetItem(dq, len - 1);
        if (last && PyObject_TypeCheck(last, &RecordBuffer_Type) && !((RecordBuffer *)last)->closed) {
            appended = rb_append((RecordBuffer *)last, key, value, ts, &delta);
            if (appended == 2 && self->grow != Py_None) {
                /* its reservation is used up: grow it as RecordAccumulator.append would (doubling, up
                   to batch.size), then the record goes in here too; large records thus stay on this
                   path except for the one opening a batch */
                Py_ssize_t rec = 64 + (value ? PyBytes_GET_SIZE(value) : 0) + (key ? PyBytes_GET_SIZE(key) : 0);
                PyObject *g = PyObject_CallFunction(self->grow, "On", last, rec);
                int more = g ? PyObject_IsTrue(g) : -1;
                Py_XDECREF(g);
                appended = more < 0 ? -1 : more ? rb_append((RecordBuffer *)last, key, value, ts, &delta) : 2;
            }
        }
    }
    int failed = PyErr_Occurred() != NULL || appended < 0;
    PyObject *rel = PyObject_CallNoArgs(self->release);
    if (!rel || failed) {
        Py_XDECREF(rel);
        Py_XDECREF(last);
        return NULL;
    }
    Py_DECREF(rel);
    if (appended != 1) {                    /* no open batch with room: Python opens one */
        Py_XDECREF(last);
        goto fallback;
    }
    PyTypeObject *ft = (PyTypeObject *)self->future_type;
    RecordFuture *fut = (RecordFuture *)ft->tp_alloc(ft, 0);
    if (!fut) {
        Py_DECREF(last);
        return NULL;
    }
    fut->batch = last;                      /* the reference taken by PySequence_GetItem */
    fut->delta = delta;
    fut->callbacks = Py_NewRef(Py_None);
    int full = ((RecordBuffer *)last)->closed;
    if (full || self->on_tick != Py_None) {
        struct timespec mono;
        clock_gettime(CLOCK_MONOTONIC, &mono);
        long long now_ns = (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec;
        PyObject *r2 = NULL;
        if (full) {                         /* the batch is full: stick elsewhere (KIP-480), send */
            self->next_tick_ns = now_ns + self->tick_ns;
            r2 = PyObject_CallFunction(self->on_full, "Onn", topic, partition, (Py_ssize_t)sticky);
        } else if (now_ns >= self->next_tick_ns ||
                   (now_ns >= self->next_sealed_ns && self->sealer != Py_None && sealer_has_done(self->sealer))) {
            self->next_tick_ns = now_ns + self->tick_ns;
            self->next_sealed_ns = now_ns + SEALED_POKE_NS;
            r2 = PyObject_CallNoArgs(self->on_tick);
        } else {
            return (PyObject *)fut;
        }
        if (!r2) {
            Py_DECREF(fut);
            return NULL;
        }
        Py_DECREF(r2);
    }
    return (PyObject *)fut;

fallback:
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *fp_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"producer", "sender", "net", "batches", "lock", "sticky", "future_type",
                             "fallback", "on_full", "hash_keys", "max_record", "on_tick", "tick_ms",
                             "txn_sendable", "grow", "sealer", NULL};
    PyObject *producer, *sender, *net, *batches, *lock, *sticky, *ft, *fallback, *on_full;
    PyObject *on_tick = Py_None, *txn_sendable = Py_None, *grow = Py_None, *sealer = Py_None;
    int hash_keys;
    Py_ssize_t max_record;
    double tick_ms = 1.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO!OO!OOOin|OdOOO:FastProduce", kwlist, &producer, &sender,
                                     &net, &PyDict_Type, &batches, &lock, &PyDict_Type, &sticky, &ft,
                                     &fallback, &on_full, &hash_keys, &max_record, &on_tick, &tick_ms,
                                     &txn_sendable, &grow, &sealer))
        return NULL;
    if (sealer != Py_None && !is_native_sealer(sealer)) {
        PyErr_SetString(PyExc_TypeError, "sealer: a NativeSealer or None");
        return NULL;
    }
    if (txn_sendable != Py_None && !PySet_CheckExact(txn_sendable)) {
        PyErr_SetString(PyExc_TypeError, "txn_sendable: a set or None");
        return NULL;
    }
    if (on_tick != Py_None && !PyCallable_Check(on_tick)) {
        PyErr_SetString(PyExc_TypeError, "on_tick: a callable or None");
        return NULL;
    }
    if (grow != Py_None && !PyCallable_Check(grow)) {
        PyErr_SetString(PyExc_TypeError, "grow: a callable or None");
        return NULL;
    }
    if (!PyType_Check(ft) || !PyType_IsSubtype((PyTypeObject *)ft, &RecordFuture_Type) ||
        ((PyTypeObject *)ft)->tp_basicsize != RecordFuture_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "future_type: a RecordFuture subclass without extra fields");
        return NULL;
    }
    FastProduce *self = (FastProduce *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->vectorcall = fp_call;
    self->acquire = PyObject_GetAttrString(lock, "acquire");
    self->release = PyObject_GetAttrString(lock, "release");
    if (!self->acquire || !self->release) {
        Py_DECREF(self);
        return NULL;
    }
    self->producer = Py_NewRef(producer);
    self->sender = Py_NewRef(sender);
    self->net = Py_NewRef(net);
    self->batches = Py_NewRef(batches);
    self->sticky = Py_NewRef(sticky);
    self->future_type = Py_NewRef(ft);
    self->fallback = Py_NewRef(fallback);
    self->on_full = Py_NewRef(on_full);
    self->grow = Py_NewRef(grow);
    self->hash_keys = hash_keys;
    self->max_record = max_record;
    self->on_tick = Py_NewRef(on_tick);
    self->txn_sendable = Py_NewRef(txn_sendable);
    self->sealer = Py_NewRef(sealer);
    self->tick_ns = (long long)(tick_ms * 1e6);
    self->next_tick_ns = 0;
    self->next_sealed_ns = 0;
    return (PyObject *)self;
}

/* A column of append_run: a list of bytes/None, or an Arrow binary array's buffers as a tuple
 * (offsets, data, validity or None, array offset, 64-bit offsets, length) -- batch_produce.ArrowBytes. */
typedef struct {
    int arrow;
    PyObject *list;
    Py_buffer offs, data, valid;
    int has_valid, wide;
    Py_ssize_t off, len;
} col_t;

static void col_close(col_t *c)
{
    if (c->arrow) {
        PyBuffer_Release(&c->offs);
        PyBuffer_Release(&c->data);
        if (c->has_valid)
            PyBuffer_Release(&c->valid);
    }
    c->arrow = 0;
}

/* 1 opened, 0 not a column this handles, -1 error */
static int col_open(PyObject *o, col_t *c, Py_ssize_t stop)
{
    memset(c, 0, sizeof(*c));
    if (PyList_CheckExact(o)) {
        c->list = o;
        return PyList_GET_SIZE(o) >= stop;
    }
    if (!PyTuple_CheckExact(o) || PyTuple_GET_SIZE(o) != 6)
        return 0;
    PyObject *vo = PyTuple_GET_ITEM(o, 2);
    c->off = PyLong_AsSsize_t(PyTuple_GET_ITEM(o, 3));
    c->wide = PyObject_IsTrue(PyTuple_GET_ITEM(o, 4));
    c->len = PyLong_AsSsize_t(PyTuple_GET_ITEM(o, 5));
    if (PyErr_Occurred() || c->wide < 0)
        return -1;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(o, 0), &c->offs, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(o, 1), &c->data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&c->offs);
        return -1;
    }
    if (vo != Py_None) {
        if (PyObject_GetBuffer(vo, &c->valid, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&c->offs);
            PyBuffer_Release(&c->data);
            return -1;
        }
        c->has_valid = 1;
    }
    c->arrow = 1;
    Py_ssize_t w = c->wide ? 8 : 4;
    if (c->off < 0 || c->len < stop || c->offs.len < (c->off + c->len + 1) * w ||
        (c->has_valid && c->valid.len * 8 < c->off + c->len)) {
        col_close(c);
        return 0;
    }
    return 1;
}

/* Record i of the column: 1 with *p (NULL for null) and *len set, 0 not plain (stop the run) */
static int col_get(col_t *c, Py_ssize_t i, const char **p, Py_ssize_t *len)
{
    static const char empty[1] = {0};
    if (!c->arrow) {
        PyObject *o = PyList_GET_ITEM(c->list, i);
        if (o == Py_None) {
            *p = NULL;
            *len = 0;
            return 1;
        }
        if (!PyBytes_CheckExact(o))
            return 0;
        *p = PyBytes_AS_STRING(o);
        *len = PyBytes_GET_SIZE(o);
        return 1;
    }
    Py_ssize_t j = c->off + i;
    if (c->has_valid && !((((const uint8_t *)c->valid.buf)[j >> 3] >> (j & 7)) & 1)) {
        *p = NULL;
        *len = 0;
        return 1;
    }
    int64_t a, b;
    if (c->wide) {
        memcpy(&a, (const char *)c->offs.buf + j * 8, 8);
        memcpy(&b, (const char *)c->offs.buf + j * 8 + 8, 8);
    } else {
        int32_t a4, b4;
        memcpy(&a4, (const char *)c->offs.buf + j * 4, 4);
        memcpy(&b4, (const char *)c->offs.buf + j * 4 + 4, 4);
        a = a4;
        b = b4;
    }
    if (a < 0 || b < a || b > c->data.len)
        return 0;                               /* not a well-formed array: Python decides */
    *p = c->data.len ? (const char *)c->data.buf + a : empty;
    *len = (Py_ssize_t)(b - a);
    return 1;
}

/* append_run(batch, values, keys, parts, headers, start, stop, ts, max_record, hash_mode, n, p, sticky)
 * -> how many records from `start` were appended to `batch`: Producer.produce_batch's runs
 * (client/batch_produce.py; _py_append_run there is the reference, this must match it). Appends while
 * each record goes to partition p (parts: None, an int for all, or a list of int/None; a record with
 * no partition goes by murmur2(key) % n when keyed and hash_mode, else to `sticky`), is plain (bytes or
 * None key and value, no headers, key+value <= max_record) and fits; stops after the record that closes
 * the batch. ts: None (now, per record), an int, or a list. values/keys: lists, or Arrow buffers
 * (col_t). The caller holds the accumulator's lock. */
static PyObject *py_append_run(PyObject *self, PyObject *args)
{
    PyObject *batch, *values, *keys, *parts, *headers, *ts;
    Py_ssize_t start, stop, max_record, n, p, sticky;
    int hash_mode;
    if (!PyArg_ParseTuple(args, "OOOOOnnOninnn:append_run", &batch, &values, &keys, &parts,
                          &headers, &start, &stop, &ts, &max_record, &hash_mode, &n, &p, &sticky))
        return NULL;
    if (!PyObject_TypeCheck(batch, &RecordBuffer_Type) ||
        (headers != Py_None && !PyList_CheckExact(headers)) ||
        (parts != Py_None && !PyLong_CheckExact(parts) && !PyList_CheckExact(parts)) ||
        (ts != Py_None && !PyLong_CheckExact(ts) && !PyList_CheckExact(ts)) || n <= 0)
        return PyLong_FromLong(0);              /* odd input: record by record in Python */
    RecordBuffer *rb = (RecordBuffer *)batch;
    Py_ssize_t fixed_part = -2;                 /* -2: per record */
    if (parts != Py_None && PyLong_CheckExact(parts)) {
        fixed_part = PyLong_AsSsize_t(parts);
        if (fixed_part == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return PyLong_FromLong(0);
        }
    }
    long long fixed_ts = 0;
    int ts_mode = ts == Py_None ? 0 : PyLong_CheckExact(ts) ? 1 : 2;
    if (ts_mode == 1) {
        int overflow;
        fixed_ts = PyLong_AsLongLongAndOverflow(ts, &overflow);
        if (overflow || (fixed_ts == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return PyLong_FromLong(0);
        }
    }
    if (start < 0 || start > stop ||
        (headers != Py_None && PyList_GET_SIZE(headers) < stop) ||
        (fixed_part == -2 && parts != Py_None && PyList_GET_SIZE(parts) < stop) ||
        (ts_mode == 2 && PyList_GET_SIZE(ts) < stop))
        return PyLong_FromLong(0);
    col_t vc, kc;
    int r0 = col_open(values, &vc, stop);
    if (r0 <= 0)
        return r0 < 0 ? NULL : PyLong_FromLong(0);
    int has_keys = keys != Py_None;
    if (has_keys) {
        r0 = col_open(keys, &kc, stop);
        if (r0 <= 0) {
            col_close(&vc);
            return r0 < 0 ? NULL : PyLong_FromLong(0);
        }
    }
    PyObject *result = NULL;
    Py_ssize_t i = start;
    for (; i < stop && !rb->closed; i++) {
        const char *v, *k = NULL;
        Py_ssize_t vl, kl = 0;
        if (!col_get(&vc, i, &v, &vl) || (has_keys && !col_get(&kc, i, &k, &kl)))
            break;
        if (headers != Py_None) {
            PyObject *h = PyList_GET_ITEM(headers, i);
            if (h != Py_None) {
                int t = PyObject_IsTrue(h);
                if (t < 0)
                    goto done;
                if (t)
                    break;
            }
        }
        if (vl + kl > max_record)
            break;
        Py_ssize_t q = fixed_part;
        if (q == -2 && parts != Py_None) {
            PyObject *pq = PyList_GET_ITEM(parts, i);
            if (pq == Py_None)
                q = -2;
            else if (!PyLong_CheckExact(pq))
                break;
            else {
                q = PyLong_AsSsize_t(pq);
                if (q == -1 && PyErr_Occurred()) {
                    PyErr_Clear();
                    break;
                }
                if (q < 0)
                    break;
            }
        }
        if (q == -2) {
            if (k != NULL && hash_mode)
                q = (Py_ssize_t)(murmur2((const uint8_t *)k, kl) & 0x7FFFFFFFu) % n;
            else
                q = sticky;
        }
        if (q != p)
            break;
        long long t;
        if (ts_mode == 1) {
            t = fixed_ts;
        } else if (ts_mode == 2) {
            PyObject *to = PyList_GET_ITEM(ts, i);
            if (to == Py_None) {
                ts_mode = 3;                    /* this record: now */
            } else {
                if (!PyLong_CheckExact(to))
                    break;
                int overflow;
                t = PyLong_AsLongLongAndOverflow(to, &overflow);
                if (overflow || (t == -1 && PyErr_Occurred())) {
                    PyErr_Clear();
                    break;
                }
            }
        }
        if (ts_mode == 0 || ts_mode == 3) {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            t = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
            if (ts_mode == 3)
                ts_mode = 2;
        }
        Py_ssize_t delta;
        int r = rb_append_raw(rb, k, kl, v, vl, t, &delta);
        if (r < 0)
            goto done;
        if (r != 1)
            break;
    }
    result = PyLong_FromSsize_t(i - start);
done:
    col_close(&vc);
    if (has_keys)
        col_close(&kc);
    return result;
}

static PyTypeObject FastProduce_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kohort.protocol._crecords.FastProduce",
    .tp_basicsize = sizeof(FastProduce),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Producer.produce's common case in C; every other case goes to the Python produce.",
    .tp_traverse = (traverseproc)fp_traverse,
    .tp_clear = (inquiry)fp_clear,
    .tp_dealloc = (destructor)fp_dealloc,
    .tp_new = fp_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(FastProduce, vectorcall),
};

/* == kohort.aio's AIOProducer.send(): its common case in one call ================================ */
/* AIORecord: the fields of kohort.aio's RecordFuture (aio/record_future.py; a Python subclass adds the
 * behaviour): the batch's shared future, (topic, partition), the offset delta and the timestamp.
 * AIOSend: AIOProducer.send()'s common case (aio/producer.py's send is the reference and takes every
 * other case): a known topic, the partition given or chosen by the default partitioner (murmur2 of a
 * bytes key, else the topic's sticky partition), bytes or None key and value, no headers, no
 * transaction, the partition's open batch (a RecordBuffer subclass) with room. The record is appended
 * with rb_append (the bytes records.append_record writes), the producer's counters are moved, a full
 * batch is handed to close_batch, and an asyncio future already holding the record's RecordFuture is
 * returned (every yield_every-th one is completed by the loop's next turn instead, through
 * call_soon(complete, future, record)). */

typedef struct {
    PyObject_HEAD
    PyObject *shared;           /* the batch's asyncio future (its BatchResult) */
    PyObject *tp;               /* (topic, partition) */
    Py_ssize_t delta;           /* offset delta in the batch */
    long long ts;               /* the record's timestamp */
} AIORecord;

static int ar_traverse(AIORecord *self, visitproc visit, void *arg)
{
    Py_VISIT(self->shared);
    Py_VISIT(self->tp);
    return 0;
}

static int ar_clear(AIORecord *self)
{
    Py_CLEAR(self->shared);
    Py_CLEAR(self->tp);
    return 0;
}

static void ar_dealloc(AIORecord *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    ar_clear(self);
    tp->tp_free((PyObject *)self);
}

static int ar_init(AIORecord *self, PyObject *args, PyObject *kw)
{
    PyObject *shared, *tp;
    Py_ssize_t delta;
    long long ts;
    static char *kwlist[] = {"shared", "tp", "delta", "ts", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOnL", kwlist, &shared, &tp, &delta, &ts))
        return -1;
    Py_XSETREF(self->shared, Py_NewRef(shared));
    Py_XSETREF(self->tp, Py_NewRef(tp));
    self->delta = delta;
    self->ts = ts;
    return 0;
}

static PyMemberDef ar_members[] = {
    {"_shared", T_OBJECT, offsetof(AIORecord, shared), READONLY, "the batch's shared future"},
    {"_tp", T_OBJECT, offsetof(AIORecord, tp), READONLY, "(topic, partition)"},
    {"_delta", T_PYSSIZET, offsetof(AIORecord, delta), READONLY, "the record's offset delta"},
    {"_ts", T_LONGLONG, offsetof(AIORecord, ts), READONLY, "the record's timestamp"},
    {NULL},
};

static PyTypeObject AIORecord_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kohort.protocol._crecords.AIORecord",
    .tp_basicsize = sizeof(AIORecord),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "AIORecord(shared, tp, delta, ts): the fields of kohort.aio's RecordFuture (its base).",
    .tp_traverse = (traverseproc)ar_traverse,
    .tp_clear = (inquiry)ar_clear,
    .tp_dealloc = (destructor)ar_dealloc,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ar_init,
    .tp_members = ar_members,
};

enum { S_TOPIC, S_VALUE, S_KEY, S_PARTITION, S_TIMESTAMP, S_HEADERS, S_NARGS };
static const char *send_arg_names[S_NARGS] = {"topic", "value", "key", "partition", "timestamp_ms", "headers"};
static PyObject *send_arg_strs[S_NARGS];
static PyObject *s_aclosed, *s_afatal, *s_abuffered, *s_aqueued, *s_snapshot, *s_atopics, *s_result,
    *s_set_result, *s_loop_kw;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *producer;         /* AIOProducer: _closed, _fatal, _buffered, _queued (read, and the
                                   counters written, on every call) */
    PyObject *client;           /* its AIOClient: client.snapshot.topics -> topic -> sorted partitions */
    PyObject *open;             /* producer._open: (topic, partition) -> its open batch */
    PyTypeObject *batch_type;   /* the producer's batch class: a RecordBuffer subclass */
    PyTypeObject *record_type;  /* RecordFuture: an AIORecord subclass without extra fields */
    PyObject *sticky;           /* topic -> sticky partition (null keys), or None: partition= needed */
    PyObject *future_type;      /* asyncio.Future */
    PyObject *loop;
    PyObject *call_soon;        /* loop.call_soon */
    PyObject *complete;         /* complete(future, record): sets the result unless done */
    PyObject *close_batch;      /* close_batch(tp, batch) once a batch is full */
    PyObject *fallback;         /* the Python send (bound) */
    Py_ssize_t buffer_memory, max_queued, yield_every, sends;
    /* the last call's lookups, reused while the same objects come again: client.snapshot.topics (a
       dict replaced with the snapshot, never changed in place) and the topic's partition count; the
       (topic, partition) tuple */
    PyObject *c_topics, *c_topic, *c_tp;
    Py_ssize_t c_n;
} AIOSend;

static int as_traverse(AIOSend *self, visitproc visit, void *arg)
{
    Py_VISIT(self->producer);
    Py_VISIT(self->client);
    Py_VISIT(self->open);
    Py_VISIT(self->batch_type);
    Py_VISIT(self->record_type);
    Py_VISIT(self->sticky);
    Py_VISIT(self->future_type);
    Py_VISIT(self->loop);
    Py_VISIT(self->call_soon);
    Py_VISIT(self->complete);
    Py_VISIT(self->close_batch);
    Py_VISIT(self->fallback);
    Py_VISIT(self->c_topics);
    Py_VISIT(self->c_topic);
    Py_VISIT(self->c_tp);
    return 0;
}

static int as_clear(AIOSend *self)
{
    Py_CLEAR(self->producer);
    Py_CLEAR(self->client);
    Py_CLEAR(self->open);
    Py_CLEAR(self->batch_type);
    Py_CLEAR(self->record_type);
    Py_CLEAR(self->sticky);
    Py_CLEAR(self->future_type);
    Py_CLEAR(self->loop);
    Py_CLEAR(self->call_soon);
    Py_CLEAR(self->complete);
    Py_CLEAR(self->close_batch);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->c_topics);
    Py_CLEAR(self->c_topic);
    Py_CLEAR(self->c_tp);
    return 0;
}

static void as_dealloc(AIOSend *self)
{
    PyObject_GC_UnTrack(self);
    as_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The value of an int attribute as Py_ssize_t: 1 read, 0 not an exact int (the caller falls back),
 * -1 error. */
static int attr_ssize(PyObject *o, PyObject *name, Py_ssize_t *out)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v)
        return -1;
    if (!PyLong_CheckExact(v)) {
        Py_DECREF(v);
        return 0;
    }
    *out = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static int attr_set_ssize(PyObject *o, PyObject *name, Py_ssize_t v)
{
    PyObject *n = PyLong_FromSsize_t(v);
    if (!n)
        return -1;
    int r = PyObject_SetAttr(o, name, n);
    Py_DECREF(n);
    return r;
}

static PyObject *as_call(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    AIOSend *self = (AIOSend *)callable;
    PyObject *a[S_NARGS] = {NULL};
    if (bind_args(args, nargsf, kwnames, send_arg_strs, S_NARGS, a))
        goto fallback;
    PyObject *topic = a[S_TOPIC], *value = a[S_VALUE], *key = a[S_KEY];
    if (!topic || !PyUnicode_CheckExact(topic) || a[S_HEADERS] ||
        (value && !PyBytes_CheckExact(value)) || (key && !PyBytes_CheckExact(key)))
        goto fallback;
    /* the producer usable, with room: else the Python send waits or raises */
    int r;
    if ((r = attr_truthy(self->producer, s_aclosed)) != 0 || (r = attr_truthy(self->producer, s_afatal)) != 0) {
        if (r < 0)
            return NULL;
        goto fallback;
    }
    Py_ssize_t buffered, queued;
    if ((r = attr_ssize(self->producer, s_abuffered, &buffered)) <= 0 ||
        (r = attr_ssize(self->producer, s_aqueued, &queued)) <= 0) {
        if (r < 0)
            return NULL;
        goto fallback;
    }
    if (buffered > self->buffer_memory || queued >= self->max_queued)
        goto fallback;
    /* the topic's partitions */
    PyObject *snap = PyObject_GetAttr(self->client, s_snapshot);
    if (!snap)
        return NULL;
    PyObject *topics = PyObject_GetAttr(snap, s_atopics);
    Py_DECREF(snap);
    if (!topics)
        return NULL;
    Py_ssize_t n;
    if (topics == self->c_topics && topic == self->c_topic) {
        n = self->c_n;                      /* the same metadata, the same topic as last time */
        Py_DECREF(topics);
    } else {
        PyObject *parts = PyDict_Check(topics) ? PyDict_GetItemWithError(topics, topic) : NULL;
        if (!parts) {
            Py_DECREF(topics);
            if (PyErr_Occurred())
                return NULL;
            goto fallback;                  /* a new topic: Python asks for its metadata */
        }
        n = PyList_CheckExact(parts) ? PyList_GET_SIZE(parts) : 0;
        /* partitions 0..n-1, as a topic has them: else Python checks each one */
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *pi = PyList_GET_ITEM(parts, i);
            if (!PyLong_CheckExact(pi) || PyLong_AsSsize_t(pi) != i) {
                PyErr_Clear();
                n = 0;
            }
        }
        if (n <= 0) {
            Py_DECREF(topics);
            goto fallback;
        }
        Py_XSETREF(self->c_topics, topics);     /* the reference taken above */
        Py_XSETREF(self->c_topic, Py_NewRef(topic));
        self->c_n = n;
    }
    Py_ssize_t partition;
    if (a[S_PARTITION]) {
        if (!PyLong_CheckExact(a[S_PARTITION]))
            goto fallback;
        partition = PyLong_AsSsize_t(a[S_PARTITION]);
        if (partition == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto fallback;
        }
        if (partition < 0 || partition >= n)
            goto fallback;                  /* Python raises the clear error */
    } else if (self->sticky == Py_None) {
        goto fallback;                      /* a partitioner of the application's own */
    } else if (key) {
        partition = (Py_ssize_t)(murmur2((const uint8_t *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
                                 & 0x7FFFFFFFu) % n;
    } else {                                /* null key: the topic's sticky partition (KIP-480) */
        PyObject *sp = PyDict_GetItemWithError(self->sticky, topic);
        if (!sp) {
            if (PyErr_Occurred())
                return NULL;
            goto fallback;                  /* none yet: Python picks it */
        }
        partition = PyLong_CheckExact(sp) ? PyLong_AsSsize_t(sp) : -1;
        if (partition == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (partition < 0 || partition >= n)
            goto fallback;
    }
    long long ts;
    if (a[S_TIMESTAMP]) {
        if (!PyLong_CheckExact(a[S_TIMESTAMP]))
            goto fallback;
        int overflow;
        ts = PyLong_AsLongLongAndOverflow(a[S_TIMESTAMP], &overflow);
        if (overflow || (ts == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            goto fallback;
        }
    } else {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        ts = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    }
    /* (topic, partition), the last one's tuple while they stay the same */
    PyObject *tp = self->c_tp;
    if (!tp || PyTuple_GET_ITEM(tp, 0) != topic ||
        PyLong_AsSsize_t(PyTuple_GET_ITEM(tp, 1)) != partition) {
        PyObject *pp = PyLong_FromSsize_t(partition);
        if (!pp)
            return NULL;
        tp = PyTuple_Pack(2, topic, pp);
        Py_DECREF(pp);
        if (!tp)
            return NULL;
        Py_XSETREF(self->c_tp, tp);
    }
    PyObject *b = PyDict_GetItemWithError(self->open, tp);     /* borrowed */
    if (!b) {
        if (PyErr_Occurred())
            return NULL;
        goto fallback;                      /* no open batch: Python opens one */
    }
    if (Py_TYPE(b) != self->batch_type)
        goto fallback;
    RecordBuffer *rb = (RecordBuffer *)b;
    if (rb->closed || !PyByteArray_CheckExact(rb->buf))
        goto fallback;
    Py_INCREF(b);
    Py_INCREF(tp);
    Py_ssize_t used = PyByteArray_GET_SIZE(rb->buf), delta = -1;
    PyObject *rf = NULL, *fut = NULL, *shared = NULL;
    int appended = rb_append(rb, key, value, ts, &delta);
    if (appended < 0)
        goto error;
    if (appended != 1) {                    /* no room: Python closes it and opens the next */
        Py_DECREF(b);
        Py_DECREF(tp);
        goto fallback;
    }
    if (attr_set_ssize(self->producer, s_abuffered, buffered + PyByteArray_GET_SIZE(rb->buf) - used) < 0 ||
        attr_set_ssize(self->producer, s_aqueued, queued + 1) < 0)
        goto error;
    shared = PyObject_GetAttr(b, s_result);
    if (!shared)
        goto error;
    AIORecord *rec = (AIORecord *)self->record_type->tp_alloc(self->record_type, 0);
    if (!rec)
        goto error;
    rec->shared = shared;                   /* the reference taken above */
    shared = NULL;
    rec->tp = Py_NewRef(tp);
    rec->delta = delta;
    rec->ts = ts;
    rf = (PyObject *)rec;
    if (rb->closed) {                       /* full: on to the sender */
        PyObject *r2 = PyObject_CallFunctionObjArgs(self->close_batch, tp, b, NULL);
        if (!r2)
            goto error;
        Py_DECREF(r2);
    }
    PyObject *loop_arg[1] = {self->loop};
    fut = PyObject_Vectorcall(self->future_type, loop_arg, 0, s_loop_kw);
    if (!fut)
        goto error;
    PyObject *r3;
    if (++self->sends % self->yield_every)
        r3 = PyObject_CallMethodOneArg(fut, s_set_result, rf);
    else                                    /* the loop's next turn completes it: other tasks run */
        r3 = PyObject_CallFunctionObjArgs(self->call_soon, self->complete, fut, rf, NULL);
    if (!r3)
        goto error;
    Py_DECREF(r3);
    Py_DECREF(rf);
    Py_DECREF(b);
    Py_DECREF(tp);
    return fut;

error:
    Py_XDECREF(shared);
    Py_XDECREF(rf);
    Py_XDECREF(fut);
    Py_DECREF(b);
    Py_DECREF(tp);
    return NULL;

fallback:
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *as_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"producer", "client", "open", "batch_type", "record_type", "sticky",
                             "future_type", "loop", "complete", "close_batch", "fallback", "buffer_memory",
                             "max_queued", "yield_every", NULL};
    PyObject *producer, *client, *open, *bt, *rt, *sticky, *ft, *loop, *complete, *close_batch, *fallback;
    Py_ssize_t buffer_memory, max_queued, yield_every;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO!OOOOOOOOnnn:AIOSend", kwlist, &producer, &client,
                                     &PyDict_Type, &open, &bt, &rt, &sticky, &ft, &loop, &complete,
                                     &close_batch, &fallback, &buffer_memory, &max_queued, &yield_every))
        return NULL;
    if (!PyType_Check(bt) || !PyType_IsSubtype((PyTypeObject *)bt, &RecordBuffer_Type)) {
        PyErr_SetString(PyExc_TypeError, "batch_type: a RecordBuffer subclass");
        return NULL;
    }
    if (!PyType_Check(rt) || !PyType_IsSubtype((PyTypeObject *)rt, &AIORecord_Type) ||
        ((PyTypeObject *)rt)->tp_basicsize != AIORecord_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "record_type: an AIORecord subclass without extra fields");
        return NULL;
    }
    if (sticky != Py_None && !PyDict_Check(sticky)) {
        PyErr_SetString(PyExc_TypeError, "sticky: a dict or None");
        return NULL;
    }
    if (yield_every < 1) {
        PyErr_SetString(PyExc_ValueError, "yield_every: at least 1");
        return NULL;
    }
    AIOSend *self = (AIOSend *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->vectorcall = as_call;
    self->call_soon = PyObject_GetAttrString(loop, "call_soon");
    if (!self->call_soon) {
        Py_DECREF(self);
        return NULL;
    }
    self->producer = Py_NewRef(producer);
    self->client = Py_NewRef(client);
    self->open = Py_NewRef(open);
    self->batch_type = (PyTypeObject *)Py_NewRef(bt);
    self->record_type = (PyTypeObject *)Py_NewRef(rt);
    self->sticky = Py_NewRef(sticky);
    self->future_type = Py_NewRef(ft);
    self->loop = Py_NewRef(loop);
    self->complete = Py_NewRef(complete);
    self->close_batch = Py_NewRef(close_batch);
    self->fallback = Py_NewRef(fallback);
    self->buffer_memory = buffer_memory;
    self->max_queued = max_queued;
    self->yield_every = yield_every;
    return (PyObject *)self;
}

static PyTypeObject AIOSend_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kohort.protocol._crecords.AIOSend",
    .tp_basicsize = sizeof(AIOSend),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "AIOProducer.send()'s common case in C; every other case goes to the Python send.",
    .tp_traverse = (traverseproc)as_traverse,
    .tp_clear = (inquiry)as_clear,
    .tp_dealloc = (destructor)as_dealloc,
    .tp_new = as_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(AIOSend, vectorcall),
};

static int aio_send_types_init(PyObject *m)
{
    for (int i = 0; i < S_NARGS; i++)
        if (!send_arg_strs[i] && !(send_arg_strs[i] = PyUnicode_InternFromString(send_arg_names[i])))
            return -1;
    if ((!s_aclosed && !(s_aclosed = PyUnicode_InternFromString("_closed"))) ||
        (!s_afatal && !(s_afatal = PyUnicode_InternFromString("_fatal"))) ||
        (!s_abuffered && !(s_abuffered = PyUnicode_InternFromString("_buffered"))) ||
        (!s_aqueued && !(s_aqueued = PyUnicode_InternFromString("_queued"))) ||
        (!s_snapshot && !(s_snapshot = PyUnicode_InternFromString("snapshot"))) ||
        (!s_atopics && !(s_atopics = PyUnicode_InternFromString("topics"))) ||
        (!s_result && !(s_result = PyUnicode_InternFromString("result"))) ||
        (!s_set_result && !(s_set_result = PyUnicode_InternFromString("set_result"))) ||
        (!s_loop_kw && !(s_loop_kw = Py_BuildValue("(s)", "loop"))))
        return -1;
    if (PyType_Ready(&AIORecord_Type) < 0 || PyType_Ready(&AIOSend_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "AIORecord", (PyObject *)&AIORecord_Type) < 0 ||
        PyModule_AddObjectRef(m, "AIOSend", (PyObject *)&AIOSend_Type) < 0)
        return -1;
    return 0;
}

static int producer_types_init(PyObject *m)
{
    for (int i = 0; i < N_ARGS; i++)
        if (!arg_strs[i] && !(arg_strs[i] = PyUnicode_InternFromString(arg_names[i])))
            return -1;
    if ((!s_closed && !(s_closed = PyUnicode_InternFromString("_closed"))) ||
        (!s_fatal && !(s_fatal = PyUnicode_InternFromString("fatal"))) ||
        (!s_topics && !(s_topics = PyUnicode_InternFromString("_topics"))) ||
        (!s_error && !(s_error = PyUnicode_InternFromString("error"))) ||
        (!s_num_partitions && !(s_num_partitions = PyUnicode_InternFromString("num_partitions"))))
        return -1;
    if (PyType_Ready(&RecordBuffer_Type) < 0 || PyType_Ready(&RecordFuture_Type) < 0 ||
        PyType_Ready(&FastProduce_Type) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "RecordBuffer", (PyObject *)&RecordBuffer_Type) < 0 ||
        PyModule_AddObjectRef(m, "RecordFuture", (PyObject *)&RecordFuture_Type) < 0 ||
        PyModule_AddObjectRef(m, "FastProduce", (PyObject *)&FastProduce_Type) < 0)
        return -1;
    return 0;
}

static PyMethodDef methods[] = {
    {"configure", (PyCFunction)(void (*)(void))py_configure, METH_VARARGS | METH_KEYWORDS,
     "configure(decode_error, corrupt_error, decompress, legacy): wire in records.py's pieces."},
    {"decode_fetch", (PyCFunction)(void (*)(void))py_decode_fetch, METH_VARARGS | METH_KEYWORDS,
     "decode_fetch(buf, check_crc=False, max_size=None, min_offset=None, max_offset=None, "
     "record_factory=None, prefix=()) -> list of records of a fetch payload."},
    {"decode_columns", (PyCFunction)(void (*)(void))py_decode_columns, METH_VARARGS | METH_KEYWORDS,
     "decode_columns(buf, check_crc=False, max_size=None, min_offset=None, max_offset=None) -> "
     "Arrow-shaped column buffers (see records.Columns)."},
    {"decode_chunk", py_decode_chunk, METH_VARARGS,
     "decode_chunk(buf, start, check_crc, max_size, max_records) -> (list, next): decode_fetch's "
     "tuples from entry position `start`, stopping at the first entry boundary once max_records "
     "are out; next is where to resume, -1 when the payload is done."},
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, crc=0) -> CRC-32C (Castagnoli) of data."},
    {"check_batch", py_check_batch, METH_VARARGS,
     "check_batch(buf, pos=0) -> the v2 batch header's 13 fields if complete and its CRC matches, else None."},
    {"recycle_buffer", py_recycle_buffer, METH_VARARGS,
     "recycle_buffer(buf, room) -> bool: empty a finished batch's bytearray to `room` zero bytes, "
     "keeping its allocation."},
    {"murmur2", py_murmur2, METH_O, "murmur2(data) -> Kafka's murmur2 of data as a signed int32."},
    {"append_run", py_append_run, METH_VARARGS,
     "append_run(batch, values, keys, parts, headers, start, stop, ts, max_record, hash_mode, n, p, "
     "sticky) -> records appended to batch (Producer.produce_batch's runs)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "kohort.protocol._crecords",
    "Compiled twin of kohort.protocol.records' decoding hot path (use it through records.py).",
    -1, methods,
};

static int sealer_init(PyObject *m);      /* the native sealer, at the end of this file */

PyMODINIT_FUNC PyInit__crecords(void)
{
    crc_init_tables();
    crc_init_shift();
#if HAVE_HW_CRC
    __builtin_cpu_init();
    g_hw_crc = __builtin_cpu_supports("sse4.2") != 0;
#endif
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    if (!g_needs_python) {
        g_needs_python = PyErr_NewExceptionWithDoc(
            "kohort.protocol._crecords.NeedsPython",
            "The input needs Python's unbounded ints (a value beyond int64); redo it in Python.",
            NULL, NULL);
        if (!g_needs_python) {
            Py_DECREF(m);
            return NULL;
        }
    }
    if (PyModule_AddObjectRef(m, "NeedsPython", g_needs_python) < 0 ||
        PyModule_AddIntConstant(m, "HW_CRC32C", HAVE_HW_CRC ? g_hw_crc : 0) < 0 ||
        PyType_Ready(&FetchCursor_Type) < 0 ||
        PyModule_AddObjectRef(m, "FetchCursor", (PyObject *)&FetchCursor_Type) < 0 ||
        producer_types_init(m) < 0 || aio_send_types_init(m) < 0 ||
        sealer_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* == The native sealer: producer batches compressed and sealed on a thread that never takes the GIL ==
 *
 *   sealer_library(codec, names) -> None | str
 *       Loads the codec's shared library with dlopen (the first of `names` that opens; gzip: libz,
 *       lz4: liblz4, zstd: libzstd) and looks up the few functions the sealer calls, declared here
 *       from each library's stable public ABI (no headers needed at build time). None when the
 *       codec is usable, else a line saying why not. A success is kept for the process; a failure
 *       is not (the next call tries again).
 *   NativeSealer(codec, level)
 *       One pthread and two FIFO queues. submit(token, records, count, base_ts, max_ts,
 *       attributes, producer_id, producer_epoch, base_sequence) queues a job: compress `records`
 *       (a RecordBatch v2's records section, held by a buffer export until the job is collected, so
 *       it cannot be resized meanwhile) with the codec into a fresh bytearray after 61 bytes of
 *       room, then write the v2 header there (base offset 0, length, partition leader epoch -1,
 *       magic 2, attributes | codec, last offset delta, timestamps, producer id/epoch, base
 *       sequence, count) and the CRC-32C of attributes..end: the bytes records.write_batch_buffer
 *       gives. collect() -> [(token, wire, error)] hands back the finished jobs in submission
 *       order (wire a bytearray, or error a str). The thread reads and writes raw memory only:
 *       every Python object is made, referenced and released by the calls above, under the GIL.
 *       set_wake_fd(fd): a byte is sent to fd (the network client's wake-up socket) when the done
 *       queue stops being empty, so a thread waiting in select() collects at once; -1 stops it.
 *       close(): queued jobs are dropped, the job running ends, the thread is joined, everything
 *       is freed; submit() then raises. For tests: fail_next(n) makes the next n jobs fail as a
 *       codec error would; hold(True) keeps queued jobs waiting until hold(False) or close().
 */
#if !defined(_WIN32)
#include <pthread.h>
#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>
#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0          /* macOS: no SIGPIPE flag on send (the wake-up socket is never shut) */
#endif

#define SEAL_GZIP 1
#define SEAL_LZ4 3
#define SEAL_ZSTD 4

/* lz4frame.h's LZ4F_frameInfo_t and LZ4F_preferences_t (stable since lz4 1.8) */
typedef struct {
    unsigned block_size_id;           /* 0: the library's default, 64 KiB */
    unsigned block_mode;              /* 1: independent blocks (Kafka's Java reader refuses linked) */
    unsigned content_checksum;
    unsigned frame_type;
    unsigned long long content_size;  /* 0: not stored */
    unsigned dict_id;
    unsigned block_checksum;
} lz4f_frame_info;
typedef struct {
    lz4f_frame_info frame_info;
    int compression_level;
    unsigned auto_flush;
    unsigned favor_dec_speed;
    unsigned reserved[3];
} lz4f_preferences;

/* zlib.h's z_stream (the layout of zlib 1.x on LP64 and ILP32 alike: pointers, uInt, uLong) */
typedef struct {
    const unsigned char *next_in;
    unsigned avail_in;
    unsigned long total_in;
    unsigned char *next_out;
    unsigned avail_out;
    unsigned long total_out;
    const char *msg;
    void *state;
    void *zalloc;
    void *zfree;
    void *opaque;
    int data_type;
    unsigned long adler;
    unsigned long reserved;
} z_stream_abi;

static struct {
    void *handle;
    size_t (*bound)(size_t, const lz4f_preferences *);
    size_t (*compress)(void *, size_t, const void *, size_t, const lz4f_preferences *);
    unsigned (*is_error)(size_t);
    const char *(*error_name)(size_t);
} g_lz4;

static struct {
    void *handle;
    size_t (*bound)(size_t);
    void *(*create)(void);
    size_t (*free_ctx)(void *);
    size_t (*compress)(void *, void *, size_t, const void *, size_t, int);
    unsigned (*is_error)(size_t);
    const char *(*error_name)(size_t);
} g_zstd;

static struct {
    void *handle;
    int (*init2)(z_stream_abi *, int, int, int, int, int, const char *, int);
    int (*deflate)(z_stream_abi *, int);
    int (*end)(z_stream_abi *);
    const char *(*version)(void);
} g_zlib;

static int sealer_sym(void *h, const char *name, void **out, char *why, size_t why_len)
{
    *out = dlsym(h, name);
    if (!*out) {
        snprintf(why, why_len, "%s not found in the library", name);
        return -1;
    }
    return 0;
}

/* Called with the GIL (which serialises loading); the worker only reads the pointers after. */
static int sealer_load(int codec, const char *libname, char *why, size_t why_len)
{
    void *h = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, why_len, "%s", e ? e : libname);
        return -1;
    }
    int bad = 0;
    if (codec == SEAL_LZ4) {
        bad |= sealer_sym(h, "LZ4F_compressFrameBound", (void **)&g_lz4.bound, why, why_len);
        bad |= sealer_sym(h, "LZ4F_compressFrame", (void **)&g_lz4.compress, why, why_len);
        bad |= sealer_sym(h, "LZ4F_isError", (void **)&g_lz4.is_error, why, why_len);
        bad |= sealer_sym(h, "LZ4F_getErrorName", (void **)&g_lz4.error_name, why, why_len);
        if (!bad)
            g_lz4.handle = h;
    } else if (codec == SEAL_ZSTD) {
        bad |= sealer_sym(h, "ZSTD_compressBound", (void **)&g_zstd.bound, why, why_len);
        bad |= sealer_sym(h, "ZSTD_createCCtx", (void **)&g_zstd.create, why, why_len);
        bad |= sealer_sym(h, "ZSTD_freeCCtx", (void **)&g_zstd.free_ctx, why, why_len);
        bad |= sealer_sym(h, "ZSTD_compressCCtx", (void **)&g_zstd.compress, why, why_len);
        bad |= sealer_sym(h, "ZSTD_isError", (void **)&g_zstd.is_error, why, why_len);
        bad |= sealer_sym(h, "ZSTD_getErrorName", (void **)&g_zstd.error_name, why, why_len);
        if (!bad)
            g_zstd.handle = h;
    } else {
        bad |= sealer_sym(h, "deflateInit2_", (void **)&g_zlib.init2, why, why_len);
        bad |= sealer_sym(h, "deflate", (void **)&g_zlib.deflate, why, why_len);
        bad |= sealer_sym(h, "deflateEnd", (void **)&g_zlib.end, why, why_len);
        bad |= sealer_sym(h, "zlibVersion", (void **)&g_zlib.version, why, why_len);
        if (!bad && g_zlib.version()[0] != '1') {
            snprintf(why, why_len, "zlib %s: the sealer knows zlib 1.x's z_stream only", g_zlib.version());
            bad = 1;
        }
        if (!bad)
            g_zlib.handle = h;
    }
    if (bad) {
        dlclose(h);
        return -1;
    }
    return 0;
}

static int sealer_loaded(int codec)
{
    return codec == SEAL_LZ4 ? g_lz4.handle != NULL : codec == SEAL_ZSTD ? g_zstd.handle != NULL
           : codec == SEAL_GZIP ? g_zlib.handle != NULL : 0;
}

static PyObject *py_sealer_library(PyObject *self, PyObject *args)
{
    int codec;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "iO:sealer_library", &codec, &names))
        return NULL;
    if (codec != SEAL_GZIP && codec != SEAL_LZ4 && codec != SEAL_ZSTD)
        return PyUnicode_FromFormat("codec %d is not sealed natively", codec);
    if (sealer_loaded(codec))
        Py_RETURN_NONE;
    PyObject *seq = PySequence_Fast(names, "sealer_library: names must be a sequence of str");
    if (!seq)
        return NULL;
    char why[512] = "no library names given";
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        const char *name = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
        if (!name) {
            Py_DECREF(seq);
            return NULL;
        }
        if (sealer_load(codec, name, why, sizeof why) == 0) {
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
    }
    Py_DECREF(seq);
    return PyUnicode_FromString(why);
}

typedef struct seal_job {
    struct seal_job *next;
    PyObject *token;             /* handed back by collect() */
    Py_buffer records;           /* the records section; exported until collected */
    PyObject *out;               /* bytearray: header room + the codec's bound */
    uint8_t *out_ptr;
    size_t out_cap;
    size_t out_len;              /* set by the worker */
    int64_t base_ts, max_ts, producer_id;
    int32_t count, base_sequence;
    int16_t producer_epoch, attributes;
    int failed;
    char error[200];
} seal_job;

typedef struct {
    PyObject_HEAD
    int codec, level;
    pthread_t thread;
    int started;                 /* the thread runs (until close) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    seal_job *jobs, *jobs_tail;  /* queued, under mu */
    seal_job *done, *done_tail;  /* finished, under mu */
    int stopping;                /* under mu */
    int mu_ready;                /* mu and cv were made */
    int wake_fd;                 /* under mu */
    int fail_next;               /* under mu */
    int held;                    /* under mu: the worker takes no job while set (tests) */
    Py_ssize_t outstanding;      /* submitted, not yet collected (changed under the GIL only) */
    void *zstd_ctx;              /* the worker's */
} NativeSealer;

static inline void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }

/* The largest output the codec can make of n bytes (gzip: deflate's stored-block worst case, the
 * 18-byte gzip wrapper and slack). 0: too large. */
static size_t sealer_bound(int codec, size_t n)
{
    if (codec == SEAL_LZ4) {
        lz4f_preferences prefs;
        memset(&prefs, 0, sizeof prefs);
        prefs.frame_info.block_mode = 1;
        return g_lz4.bound(n, &prefs);
    }
    if (codec == SEAL_ZSTD)
        return g_zstd.bound(n);
    if (n > 0xF0000000u)
        return 0;
    return n + (n >> 3) + (n >> 6) + 5 + 18 + 64;
}

/* On the worker thread, without the GIL: compress and write the header. */
static void seal_one(NativeSealer *s, seal_job *j)
{
    uint8_t *dst = j->out_ptr + BATCH_HEADER_SIZE;
    size_t cap = j->out_cap - BATCH_HEADER_SIZE, n = 0;
    const void *src = j->records.buf;
    size_t len = (size_t)j->records.len;
    if (s->codec == SEAL_LZ4) {
        lz4f_preferences prefs;
        memset(&prefs, 0, sizeof prefs);
        prefs.frame_info.block_mode = 1;
        prefs.compression_level = s->level;
        n = g_lz4.compress(dst, cap, src, len, &prefs);
        if (g_lz4.is_error(n)) {
            snprintf(j->error, sizeof j->error, "lz4: %s", g_lz4.error_name(n));
            j->failed = 1;
            return;
        }
    } else if (s->codec == SEAL_ZSTD) {
        if (!s->zstd_ctx && !(s->zstd_ctx = g_zstd.create())) {
            snprintf(j->error, sizeof j->error, "zstd: could not create a compression context");
            j->failed = 1;
            return;
        }
        n = g_zstd.compress(s->zstd_ctx, dst, cap, src, len, s->level);
        if (g_zstd.is_error(n)) {
            snprintf(j->error, sizeof j->error, "zstd: %s", g_zstd.error_name(n));
            j->failed = 1;
            return;
        }
    } else {
        z_stream_abi z;
        memset(&z, 0, sizeof z);
        /* gzip wrapper (window bits 15 + 16), memLevel 8, default strategy: zlib.compressobj(level, DEFLATED, 31) */
        int rc = g_zlib.init2(&z, s->level, 8, 31, 8, 0, g_zlib.version(), (int)sizeof z);
        if (rc != 0) {
            snprintf(j->error, sizeof j->error, "gzip: deflateInit2 failed (%d)", rc);
            j->failed = 1;
            return;
        }
        z.next_in = src;
        z.avail_in = (unsigned)len;
        z.next_out = dst;
        z.avail_out = (unsigned)cap;
        rc = g_zlib.deflate(&z, 4 /* Z_FINISH */);
        n = (size_t)z.total_out;
        g_zlib.end(&z);
        if (rc != 1 /* Z_STREAM_END */) {
            snprintf(j->error, sizeof j->error, "gzip: deflate did not finish (%d)", rc);
            j->failed = 1;
            return;
        }
    }
    size_t total = BATCH_HEADER_SIZE + n;
    if (total - LOG_OVERHEAD > 0x7FFFFFFF) {
        snprintf(j->error, sizeof j->error, "the compressed batch is larger than a batch can be");
        j->failed = 1;
        return;
    }
    uint8_t *h = j->out_ptr;
    put64(h, 0);                                                 /* base offset */
    put32(h + 8, (uint32_t)(total - LOG_OVERHEAD));              /* batch length */
    put32(h + 12, 0xFFFFFFFFu);                                  /* partition leader epoch -1 */
    h[MAGIC_OFFSET] = 2;
    put16(h + ATTRIBUTES_OFFSET, (uint16_t)(j->attributes | s->codec));
    put32(h + 23, (uint32_t)(j->count - 1));                     /* last offset delta */
    put64(h + 27, (uint64_t)j->base_ts);
    put64(h + 35, (uint64_t)j->max_ts);
    put64(h + 43, (uint64_t)j->producer_id);
    put16(h + 51, (uint16_t)j->producer_epoch);
    put32(h + 53, (uint32_t)j->base_sequence);
    put32(h + 57, (uint32_t)j->count);
    put32(h + 17, crc32c(0, h + ATTRIBUTES_OFFSET, total - ATTRIBUTES_OFFSET));
    j->out_len = total;
}

static void *sealer_main(void *arg)
{
    NativeSealer *s = (NativeSealer *)arg;
#if defined(__GLIBC__)
    pthread_setname_np(pthread_self(), "kohort-sealer");
#endif
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while ((!s->jobs || s->held) && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stopping)
            break;
        seal_job *j = s->jobs;
        s->jobs = j->next;
        if (!s->jobs)
            s->jobs_tail = NULL;
        j->next = NULL;
        int fail = s->fail_next > 0;
        if (fail)
            s->fail_next--;
        pthread_mutex_unlock(&s->mu);
        if (fail) {
            snprintf(j->error, sizeof j->error, "compression failed (injected by fail_next)");
            j->failed = 1;
        } else {
            seal_one(s, j);
        }
        pthread_mutex_lock(&s->mu);
        int was_empty = s->done == NULL;
        if (s->done_tail)
            s->done_tail->next = j;
        else
            s->done = j;
        s->done_tail = j;
        if (was_empty && s->wake_fd >= 0)       /* under mu: set_wake_fd(-1) waits for this */
            (void)send(s->wake_fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    pthread_mutex_unlock(&s->mu);
    if (s->zstd_ctx) {
        g_zstd.free_ctx(s->zstd_ctx);
        s->zstd_ctx = NULL;
    }
    return NULL;
}

/* With the GIL: a job's Python references go. */
static void seal_job_free(seal_job *j)
{
    PyBuffer_Release(&j->records);
    Py_XDECREF(j->out);
    Py_XDECREF(j->token);
    PyMem_RawFree(j);
}

static int NativeSealer_init(NativeSealer *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"codec", "level", NULL};
    int codec, level;
    if (self->started || self->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "a NativeSealer is initialised once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ii:NativeSealer", kwlist, &codec, &level))
        return -1;
    if (!sealer_loaded(codec)) {
        PyErr_Format(PyExc_ValueError, "codec %d has no library loaded (sealer_library first)", codec);
        return -1;
    }
    self->codec = codec;
    self->level = level;
    self->wake_fd = -1;
    if (!self->mu_ready) {
        if (pthread_mutex_init(&self->mu, NULL) != 0)
            return PyErr_SetString(PyExc_OSError, "NativeSealer: could not make its mutex"), -1;
        if (pthread_cond_init(&self->cv, NULL) != 0) {
            pthread_mutex_destroy(&self->mu);
            return PyErr_SetString(PyExc_OSError, "NativeSealer: could not make its condition"), -1;
        }
        self->mu_ready = 1;
    }
    int rc = pthread_create(&self->thread, NULL, sealer_main, self);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->started = 1;
    return 0;
}

/* Stop the worker (the job it runs finishes; queued jobs are dropped) and free every job. */
static void sealer_stop(NativeSealer *self)
{
    if (!self->started)
        return;
    pthread_mutex_lock(&self->mu);
    self->stopping = 1;
    self->wake_fd = -1;
    pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->started = 0;
    seal_job *lists[2] = {self->jobs, self->done};
    self->jobs = self->jobs_tail = self->done = self->done_tail = NULL;
    for (int i = 0; i < 2; i++)
        for (seal_job *j = lists[i], *next; j; j = next) {
            next = j->next;
            seal_job_free(j);
        }
    self->outstanding = 0;
}

static void NativeSealer_dealloc(NativeSealer *self)
{
    sealer_stop(self);
    if (self->mu_ready) {
        pthread_mutex_destroy(&self->mu);
        pthread_cond_destroy(&self->cv);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *NativeSealer_submit(NativeSealer *self, PyObject *args)
{
    PyObject *token, *records;
    long long base_ts, max_ts, producer_id;
    int count, attributes, producer_epoch, base_sequence;
    if (!PyArg_ParseTuple(args, "OOiLLiLii:submit", &token, &records, &count, &base_ts, &max_ts,
                          &attributes, &producer_id, &producer_epoch, &base_sequence))
        return NULL;
    if (!self->started || self->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "the native sealer is closed");
        return NULL;
    }
    if (count <= 0 || attributes < 0 || attributes > 0x7FFF || (attributes & ATTR_COMPRESSION_MASK) ||
            producer_epoch < -32768 || producer_epoch > 32767) {
        PyErr_SetString(PyExc_ValueError, "submit: record count, attributes or producer epoch out of range");
        return NULL;
    }
    seal_job *j = PyMem_RawCalloc(1, sizeof *j);
    if (!j)
        return PyErr_NoMemory();
    if (PyObject_GetBuffer(records, &j->records, PyBUF_SIMPLE) < 0) {
        PyMem_RawFree(j);
        return NULL;
    }
    size_t bound = sealer_bound(self->codec, (size_t)j->records.len);
    if (bound == 0 || bound > (size_t)PY_SSIZE_T_MAX - BATCH_HEADER_SIZE) {
        PyBuffer_Release(&j->records);
        PyMem_RawFree(j);
        PyErr_SetString(PyExc_ValueError, "submit: records too large to compress");
        return NULL;
    }
    j->out_cap = BATCH_HEADER_SIZE + bound;
    j->out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)j->out_cap);
    if (!j->out) {
        PyBuffer_Release(&j->records);
        PyMem_RawFree(j);
        return NULL;
    }
    j->out_ptr = (uint8_t *)PyByteArray_AS_STRING(j->out);
    Py_INCREF(token);
    j->token = token;
    j->count = count;
    j->base_ts = base_ts;
    j->max_ts = max_ts;
    j->attributes = (int16_t)attributes;
    j->producer_id = producer_id;
    j->producer_epoch = (int16_t)producer_epoch;
    j->base_sequence = base_sequence;
    self->outstanding++;
    pthread_mutex_lock(&self->mu);
    if (self->jobs_tail)
        self->jobs_tail->next = j;
    else
        self->jobs = j;
    self->jobs_tail = j;
    pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

static PyObject *NativeSealer_collect(NativeSealer *self, PyObject *unused)
{
    if (!self->started)
        return PyList_New(0);
    pthread_mutex_lock(&self->mu);
    seal_job *j = self->done;
    self->done = self->done_tail = NULL;
    pthread_mutex_unlock(&self->mu);
    PyObject *out = PyList_New(0);
    int bad = out == NULL;
    for (seal_job *next; j; j = next) {
        next = j->next;
        self->outstanding--;
        PyObject *item = NULL;
        if (!bad) {
            if (j->failed) {
                item = Py_BuildValue("(OOs)", j->token, Py_None, j->error);
            } else if (PyByteArray_Resize(j->out, (Py_ssize_t)j->out_len) == 0) {
                item = PyTuple_Pack(3, j->token, j->out, Py_None);
            }
            if (!item || PyList_Append(out, item) < 0)
                bad = 1;
            Py_XDECREF(item);
        }
        seal_job_free(j);
    }
    if (bad) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *NativeSealer_set_wake_fd(NativeSealer *self, PyObject *arg)
{
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (self->started) {
        pthread_mutex_lock(&self->mu);
        self->wake_fd = fd < 0 || fd > INT32_MAX ? -1 : (int)fd;
        pthread_mutex_unlock(&self->mu);
    }
    Py_RETURN_NONE;
}

static PyObject *NativeSealer_fail_next(NativeSealer *self, PyObject *arg)
{
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (self->started) {
        pthread_mutex_lock(&self->mu);
        self->fail_next = n < 0 ? 0 : n > INT32_MAX ? INT32_MAX : (int)n;
        pthread_mutex_unlock(&self->mu);
    }
    Py_RETURN_NONE;
}

static PyObject *NativeSealer_hold(NativeSealer *self, PyObject *arg)
{
    int held = PyObject_IsTrue(arg);
    if (held < 0)
        return NULL;
    if (self->started) {
        pthread_mutex_lock(&self->mu);
        self->held = held;
        pthread_cond_signal(&self->cv);
        pthread_mutex_unlock(&self->mu);
    }
    Py_RETURN_NONE;
}

static PyObject *NativeSealer_close(NativeSealer *self, PyObject *unused)
{
    sealer_stop(self);
    Py_RETURN_NONE;
}

static PyObject *NativeSealer_get_pending(NativeSealer *self, void *closure)
{
    return PyLong_FromSsize_t(self->outstanding);
}

static PyObject *NativeSealer_get_closed(NativeSealer *self, void *closure)
{
    return PyBool_FromLong(!self->started);
}

static PyMethodDef NativeSealer_methods[] = {
    {"submit", (PyCFunction)NativeSealer_submit, METH_VARARGS,
     "submit(token, records, count, base_ts, max_ts, attributes, producer_id, producer_epoch, "
     "base_sequence): queue one batch to compress and seal."},
    {"collect", (PyCFunction)NativeSealer_collect, METH_NOARGS,
     "collect() -> [(token, wire, error)]: the finished jobs, in submission order."},
    {"set_wake_fd", (PyCFunction)NativeSealer_set_wake_fd, METH_O,
     "set_wake_fd(fd): send a byte to fd when finished jobs wait to be collected (-1: never)."},
    {"fail_next", (PyCFunction)NativeSealer_fail_next, METH_O,
     "fail_next(n): the next n jobs fail as a codec error would (tests)."},
    {"hold", (PyCFunction)NativeSealer_hold, METH_O,
     "hold(flag): while true, queued jobs wait (tests: jobs still queued at close)."},
    {"close", (PyCFunction)NativeSealer_close, METH_NOARGS,
     "close(): drop queued jobs, join the thread, free everything."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef NativeSealer_getset[] = {
    {"pending", (getter)NativeSealer_get_pending, NULL, "jobs submitted and not yet collected", NULL},
    {"closed", (getter)NativeSealer_get_closed, NULL, "True once closed", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject NativeSealer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kohort.protocol._crecords.NativeSealer",
    .tp_basicsize = sizeof(NativeSealer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "NativeSealer(codec, level): compresses and seals producer batches on its own thread.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)NativeSealer_init,
    .tp_dealloc = (destructor)NativeSealer_dealloc,
    .tp_methods = NativeSealer_methods,
    .tp_getset = NativeSealer_getset,
};

static int is_native_sealer(PyObject *o) { return Py_TYPE(o) == &NativeSealer_Type; }

/* 1 when the sealer has finished jobs not yet collected. A hint read without its mutex (the worker
   sets `done` under it; a stale read only delays or repeats a poke, which collects under it). */
static int sealer_has_done(PyObject *o)
{
    NativeSealer *s = (NativeSealer *)o;
    return s->outstanding > 0 && __atomic_load_n(&s->done, __ATOMIC_RELAXED) != NULL;
}

static PyMethodDef sealer_functions[] = {
    {"sealer_library", py_sealer_library, METH_VARARGS,
     "sealer_library(codec, names) -> None if the codec's library is loaded, else why not."},
    {NULL, NULL, 0, NULL},
};

static int sealer_init(PyObject *m)
{
    if (PyType_Ready(&NativeSealer_Type) < 0 ||
        PyModule_AddObjectRef(m, "NativeSealer", (PyObject *)&NativeSealer_Type) < 0 ||
        PyModule_AddFunctions(m, sealer_functions) < 0)
        return -1;
    return 0;
}
#else
static int sealer_init(PyObject *m)
{
    return 0;       /* no native sealer: the producer seals on its Python path */
}
static int is_native_sealer(PyObject *o) { return 0; }
static int sealer_has_done(PyObject *o) { return 0; }
#endif
