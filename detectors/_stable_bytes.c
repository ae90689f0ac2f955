/* stableStringify in C, for the values the wire decoder gives (detectors/stable_json.py).
 *
 * stable_bytes(value) -> bytes | None: the UTF-8 bytes of OpenClaw's stableStringify(value)
 * (spec section 3.1), or None where this encoder cannot be sure of them; the caller then takes
 * the general path (msgspec and the Python reference, canonical_bytes in stable_json.py).
 *
 * Exactly these are encoded here: None, True, False; int within +-2**53; str without surrogate
 * code points (JSON.stringify's escapes: \" \\ \b \f \n \r \t, \u00xx for other controls,
 * everything else as UTF-8); exact list; exact dict with str keys of the Basic Multilingual
 * Plane only (where code point order is UTF-16 code unit order: the order of JavaScript's
 * sort); and the two objects bound by bind(): the JavaScript number (its text from the bound
 * function) and undefined. Anything else, or nesting deeper than MAX_DEPTH (a cycle), gives
 * None.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 256
#define MAX_SAFE_INTEGER 9007199254740992LL /* 2**53 */
#define SMALL_DICT 16

static PyObject *number_type = NULL;   /* JSNumber */
static PyObject *number_text = NULL;   /* JSNumber -> its JSON text (str) */
static PyObject *undefined = NULL;     /* UNDEFINED */

#define STACK_BYTES 1024

/* The output: on the stack while it fits (most values), then in a bytes object grown by
 * _PyBytes_Resize, which becomes the result without another copy. */
typedef struct {
    PyObject *bytes; /* NULL while the output is in ``stack`` */
    char *data;
    Py_ssize_t size, capacity;
    char stack[STACK_BYTES];
} Out;

/* 0: done; 1: not this encoder's (None); -1: a Python error is set */
enum { DONE = 0, UNSURE = 1, FAILED = -1 };

static int grow(Out *out, Py_ssize_t more) {
    Py_ssize_t capacity = out->capacity * 2;
    while (capacity < out->size + more) {
        capacity *= 2;
    }
    if (out->bytes == NULL) {
        out->bytes = PyBytes_FromStringAndSize(NULL, capacity);
        if (out->bytes == NULL) {
            return FAILED;
        }
        memcpy(PyBytes_AS_STRING(out->bytes), out->stack, (size_t)out->size);
    } else if (_PyBytes_Resize(&out->bytes, capacity) < 0) {
        return FAILED;
    }
    out->data = PyBytes_AS_STRING(out->bytes);
    out->capacity = capacity;
    return DONE;
}

static inline int reserve(Out *out, Py_ssize_t more) {
    return out->size + more <= out->capacity ? DONE : grow(out, more);
}

static inline int put(Out *out, const char *text, Py_ssize_t size) {
    if (reserve(out, size) != DONE) {
        return FAILED;
    }
    memcpy(out->data + out->size, text, (size_t)size);
    out->size += size;
    return DONE;
}

/* What JSON.stringify writes for a code point below 0x80 that needs an escape (0: none). */
static const char SHORT_ESCAPE[128] = {
    ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r', ['"'] = '"', ['\\'] = '\\',
};

static int needs_escape(Py_UCS4 c) { return c < 0x20 || c == '"' || c == '\\'; }

static int put_escape(Out *out, Py_UCS4 c) {
    static const char hex[] = "0123456789abcdef";
    char text[6] = {'\\', SHORT_ESCAPE[c], 0, 0, 0, 0};
    if (text[1]) {
        return put(out, text, 2);
    }
    text[1] = 'u';
    text[2] = '0';
    text[3] = '0';
    text[4] = hex[c >> 4];
    text[5] = hex[c & 15];
    return put(out, text, 6);
}

/* An ASCII string is copied as it is scanned, a block at a time: copy_clean copies the
 * longest prefix of whole blocks with nothing to escape and stops at the first byte to escape
 * (copied up to it) or before a tail shorter than a block. AVX2 takes 32 bytes at a time where
 * the CPU has it, SSE2 (every x86-64) 16; elsewhere, and where built with -DLOOPWATCH_PORTABLE
 * (as a test does), a word test takes 8. A byte needs an escape below 0x20 (as a signed byte:
 * ASCII is never negative), or as '"' or '\\'. */
typedef Py_ssize_t (*CopyClean)(const unsigned char *chars, Py_ssize_t length, char *dest);

/* Nonzero when one of the 8 bytes needs an escape (the "has less" and "has zero" word tests,
 * exact for the word as a whole). */
static int word_needs_escape(const unsigned char *chars) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t word;
    memcpy(&word, chars, sizeof word);
    uint64_t quote = word ^ (ones * '"'), backslash = word ^ (ones * '\\');
    return (((word - ones * 0x20) & ~word & highs) | ((quote - ones) & ~quote & highs) |
            ((backslash - ones) & ~backslash & highs)) != 0;
}

static Py_ssize_t copy_clean_words(const unsigned char *chars, Py_ssize_t length, char *dest) {
    Py_ssize_t index = 0;
    while (index + 8 <= length && !word_needs_escape(chars + index)) {
        index += 8;
    }
    if (index + 8 <= length) { /* the word holding a byte to escape: up to that byte */
        while (!needs_escape(chars[index])) {
            index++;
        }
    }
    memcpy(dest, chars, (size_t)index);
    return index;
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(LOOPWATCH_PORTABLE)
#include <immintrin.h>
#define SIMD 1

static Py_ssize_t copy_clean_sse2(const unsigned char *chars, Py_ssize_t length, char *dest) {
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    Py_ssize_t index = 0;
    for (; index + 16 <= length; index += 16) {
        __m128i block = _mm_loadu_si128((const __m128i *)(chars + index));
        __m128i special = _mm_or_si128(_mm_cmpeq_epi8(block, quote), _mm_cmpeq_epi8(block, backslash));
        unsigned int mask = (unsigned int)_mm_movemask_epi8(_mm_or_si128(special, _mm_cmplt_epi8(block, space)));
        if (mask) {
            int clean = __builtin_ctz(mask);
            memcpy(dest + index, chars + index, (size_t)clean);
            return index + clean;
        }
        _mm_storeu_si128((__m128i *)(dest + index), block);
    }
    return index;
}

__attribute__((target("avx2"))) static Py_ssize_t copy_clean_avx2(const unsigned char *chars, Py_ssize_t length,
                                                                   char *dest) {
    const __m256i quote = _mm256_set1_epi8('"'), backslash = _mm256_set1_epi8('\\'), space = _mm256_set1_epi8(0x20);
    Py_ssize_t index = 0;
    for (; index + 32 <= length; index += 32) {
        __m256i block = _mm256_loadu_si256((const __m256i *)(chars + index));
        __m256i special = _mm256_or_si256(_mm256_cmpeq_epi8(block, quote), _mm256_cmpeq_epi8(block, backslash));
        special = _mm256_or_si256(special, _mm256_cmpgt_epi8(space, block));
        unsigned int mask = (unsigned int)_mm256_movemask_epi8(special);
        if (mask) {
            int clean = __builtin_ctz(mask);
            memcpy(dest + index, chars + index, (size_t)clean);
            return index + clean;
        }
        _mm256_storeu_si256((__m256i *)(dest + index), block);
    }
    return index;
}
#endif

static CopyClean copy_clean = copy_clean_words; /* chosen when the module is loaded */
static const char *copy_clean_name = "words";

/* The bytes of an ASCII string one at a time (a short string, or the tail of a long one). */
static int put_ascii_bytes(Out *out, const unsigned char *chars, Py_ssize_t length) {
    for (Py_ssize_t index = 0; index < length; index++) {
        if (needs_escape(chars[index])) {
            if (put_escape(out, chars[index]) != DONE || reserve(out, length - index - 1) != DONE) {
                return FAILED;
            }
        } else {
            out->data[out->size++] = (char)chars[index];
        }
    }
    return DONE;
}

static int put_ascii(Out *out, const unsigned char *chars, Py_ssize_t length) {
    Py_ssize_t index = 0;
    if (reserve(out, length) != DONE) {
        return FAILED;
    }
    if (length < 16) {
        return put_ascii_bytes(out, chars, length);
    }
    while (index < length) {
        Py_ssize_t clean = copy_clean(chars + index, length - index, out->data + out->size);
        out->size += clean;
        index += clean;
        if (index < length && needs_escape(chars[index])) {
            if (put_escape(out, chars[index]) != DONE || reserve(out, length - index - 1) != DONE) {
                return FAILED;
            }
            index++;
            continue;
        }
        return put_ascii_bytes(out, chars + index, length - index); /* the tail shorter than a block */
    }
    return DONE;
}

static int put_string(Out *out, PyObject *text) {
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    if (put(out, "\"", 1) != DONE) {
        return FAILED;
    }
    if (PyUnicode_IS_ASCII(text)) {
        if (put_ascii(out, PyUnicode_1BYTE_DATA(text), length) != DONE) {
            return FAILED;
        }
        return put(out, "\"", 1);
    }
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    if (reserve(out, length * 4 + 1) != DONE) { /* UTF-8: at most 4 bytes a code point */
        return FAILED;
    }
    for (Py_ssize_t index = 0; index < length; index++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, index);
        if (c < 0x80) {
            if (needs_escape(c)) {
                if (put_escape(out, c) != DONE || reserve(out, (length - index) * 4 + 1) != DONE) {
                    return FAILED;
                }
            } else {
                out->data[out->size++] = (char)c;
            }
        } else if (c < 0x800) {
            out->data[out->size++] = (char)(0xC0 | (c >> 6));
            out->data[out->size++] = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            if (c >= 0xD800 && c <= 0xDFFF) {
                return UNSURE; /* a surrogate: OpenClaw sanitises it first (the Python path) */
            }
            out->data[out->size++] = (char)(0xE0 | (c >> 12));
            out->data[out->size++] = (char)(0x80 | ((c >> 6) & 0x3F));
            out->data[out->size++] = (char)(0x80 | (c & 0x3F));
        } else {
            out->data[out->size++] = (char)(0xF0 | (c >> 18));
            out->data[out->size++] = (char)(0x80 | ((c >> 12) & 0x3F));
            out->data[out->size++] = (char)(0x80 | ((c >> 6) & 0x3F));
            out->data[out->size++] = (char)(0x80 | (c & 0x3F));
        }
    }
    return put(out, "\"", 1);
}

static int put_value(Out *out, PyObject *value, int depth);

/* Keys in UTF-16 code unit order; 1: a key this encoder cannot order (astral, or not a str). */
static int key_order_unsure(PyObject *key) {
    return !PyUnicode_CheckExact(key) || PyUnicode_KIND(key) == PyUnicode_4BYTE_KIND;
}

static int key_less(PyObject *a, PyObject *b) {
    if (PyUnicode_KIND(a) == PyUnicode_1BYTE_KIND && PyUnicode_KIND(b) == PyUnicode_1BYTE_KIND) {
        Py_ssize_t la = PyUnicode_GET_LENGTH(a), lb = PyUnicode_GET_LENGTH(b);
        int order = memcmp(PyUnicode_1BYTE_DATA(a), PyUnicode_1BYTE_DATA(b), (size_t)(la < lb ? la : lb));
        return order < 0 || (order == 0 && la < lb);
    }
    return PyUnicode_Compare(a, b) < 0; /* code points: both keys are BMP here */
}

/* Sorts count keys (and their values alongside) with a bottom-up merge sort, through the
 * scratch arrays spare_keys and spare_values of the same size: O(n log n), where the
 * insertion sort of small dicts would take a big dict's request past any deadline. */
static void merge_sort(PyObject **keys, PyObject **values, PyObject **spare_keys, PyObject **spare_values,
                       Py_ssize_t count) {
    PyObject **from_keys = keys, **from_values = values, **to_keys = spare_keys, **to_values = spare_values;
    for (Py_ssize_t width = 1; width < count; width *= 2) {
        for (Py_ssize_t start = 0; start < count; start += 2 * width) {
            Py_ssize_t middle = start + width < count ? start + width : count;
            Py_ssize_t end = start + 2 * width < count ? start + 2 * width : count;
            Py_ssize_t left = start, right = middle, at = start;
            while (left < middle && right < end) {
                Py_ssize_t take = key_less(from_keys[right], from_keys[left]) ? right++ : left++;
                to_keys[at] = from_keys[take];
                to_values[at++] = from_values[take];
            }
            while (left < middle) {
                to_keys[at] = from_keys[left];
                to_values[at++] = from_values[left++];
            }
            while (right < end) {
                to_keys[at] = from_keys[right];
                to_values[at++] = from_values[right++];
            }
        }
        PyObject **swap = from_keys;
        from_keys = to_keys;
        to_keys = swap;
        swap = from_values;
        from_values = to_values;
        to_values = swap;
    }
    if (from_keys != keys) {
        memcpy(keys, from_keys, sizeof(PyObject *) * (size_t)count);
        memcpy(values, from_values, sizeof(PyObject *) * (size_t)count);
    }
}

static int put_dict(Out *out, PyObject *dict, int depth) {
    Py_ssize_t count = PyDict_GET_SIZE(dict), position = 0, index = 0;
    PyObject *small_keys[SMALL_DICT], *small_values[SMALL_DICT];
    PyObject **keys = small_keys, **values = small_values;
    PyObject *key, *item;
    int status = DONE;
    if (count > SMALL_DICT) { /* keys, values, and the merge sort's scratch copies of both */
        keys = PyMem_Malloc(sizeof(PyObject *) * (size_t)count * 4);
        if (keys == NULL) {
            PyErr_NoMemory();
            return FAILED;
        }
        values = keys + count;
    }
    while (PyDict_Next(dict, &position, &key, &item)) {
        if (key_order_unsure(key)) {
            status = UNSURE;
            goto done;
        }
        if (count > SMALL_DICT) { /* sorted below */
            keys[index] = key;
            values[index++] = item;
            continue;
        }
        /* insertion sort: the dicts of tool calls hold a handful of keys */
        Py_ssize_t at = index++;
        while (at > 0 && key_less(key, keys[at - 1])) {
            keys[at] = keys[at - 1];
            values[at] = values[at - 1];
            at--;
        }
        keys[at] = key;
        values[at] = item;
    }
    if (count > SMALL_DICT) {
        merge_sort(keys, values, keys + 2 * count, keys + 3 * count, count);
    }
    if ((status = put(out, "{", 1)) != DONE) {
        goto done;
    }
    for (index = 0; index < count; index++) {
        if ((index && (status = put(out, ",", 1)) != DONE) || (status = put_string(out, keys[index])) != DONE ||
            (status = put(out, ":", 1)) != DONE || (status = put_value(out, values[index], depth + 1)) != DONE) {
            goto done;
        }
    }
    status = put(out, "}", 1);
done:
    if (keys != small_keys) {
        PyMem_Free(keys);
    }
    return status;
}

static int put_number(Out *out, PyObject *value) {
    PyObject *text = PyObject_CallOneArg(number_text, value);
    if (text == NULL) {
        return FAILED;
    }
    int status = UNSURE;
    if (PyUnicode_CheckExact(text) && PyUnicode_IS_ASCII(text)) {
        status = put(out, (const char *)PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text));
    }
    Py_DECREF(text);
    return status;
}

static int put_value(Out *out, PyObject *value, int depth) {
    if (depth > MAX_DEPTH) {
        return UNSURE;
    }
    if (value == Py_None) {
        return put(out, "null", 4);
    }
    if (value == Py_True) {
        return put(out, "true", 4);
    }
    if (value == Py_False) {
        return put(out, "false", 5);
    }
    PyTypeObject *type = Py_TYPE(value);
    if (type == &PyUnicode_Type) {
        return put_string(out, value);
    }
    if (type == &PyLong_Type) {
        int overflow = 0;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number == -1 && PyErr_Occurred()) {
            return FAILED;
        }
        if (overflow || number > MAX_SAFE_INTEGER || number < -MAX_SAFE_INTEGER) {
            return UNSURE; /* JavaScript rounds it to a double: the Python path writes that */
        }
        char text[24];
        char *end = text + sizeof text, *at = end;
        unsigned long long magnitude = number < 0 ? 0ULL - (unsigned long long)number : (unsigned long long)number;
        do {
            *--at = (char)('0' + magnitude % 10);
            magnitude /= 10;
        } while (magnitude);
        if (number < 0) {
            *--at = '-';
        }
        return put(out, at, end - at);
    }
    if (type == &PyDict_Type) {
        return put_dict(out, value, depth);
    }
    if (type == &PyList_Type) {
        Py_ssize_t count = PyList_GET_SIZE(value);
        int status = put(out, "[", 1);
        for (Py_ssize_t index = 0; status == DONE && index < count; index++) {
            if (index) {
                status = put(out, ",", 1);
            }
            if (status == DONE) {
                status = put_value(out, PyList_GET_ITEM(value, index), depth + 1);
            }
        }
        return status == DONE ? put(out, "]", 1) : status;
    }
    if (number_type != NULL && (PyObject *)type == number_type) {
        return put_number(out, value);
    }
    if (value == undefined) {
        return put(out, "undefined", 9);
    }
    return UNSURE;
}

static PyObject *stable_bytes(PyObject *module, PyObject *value) {
    (void)module;
    Out out;
    out.bytes = NULL;
    out.data = out.stack;
    out.size = 0;
    out.capacity = STACK_BYTES;
    int status = put_value(&out, value, 0);
    if (status != DONE) {
        Py_XDECREF(out.bytes);
        if (status == FAILED) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (out.bytes == NULL) {
        return PyBytes_FromStringAndSize(out.stack, out.size);
    }
    if (_PyBytes_Resize(&out.bytes, out.size) < 0) {
        return NULL;
    }
    return out.bytes;
}

static PyObject *bind(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *type, *text, *undefined_value;
    if (!PyArg_ParseTuple(args, "OOO:bind", &type, &text, &undefined_value)) {
        return NULL;
    }
    if (!PyType_Check(type) || !PyCallable_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "bind(number_type, number_text, undefined): a type and a callable");
        return NULL;
    }
    Py_INCREF(type);
    Py_INCREF(text);
    Py_INCREF(undefined_value);
    Py_XSETREF(number_type, type);
    Py_XSETREF(number_text, text);
    Py_XSETREF(undefined, undefined_value);
    Py_RETURN_NONE;
}

/* block_scan(name=None) -> str: the block scan in use; with a name ("avx2", "sse2", "words"),
 * use that one from now on (the tests check each), ValueError where this CPU lacks it. */
static PyObject *block_scan(PyObject *module, PyObject *args) {
    (void)module;
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "|s:block_scan", &name)) {
        return NULL;
    }
    if (name == NULL) {
        return PyUnicode_FromString(copy_clean_name);
    }
    if (strcmp(name, "words") == 0) {
        copy_clean = copy_clean_words;
        copy_clean_name = "words";
#ifdef SIMD
    } else if (strcmp(name, "sse2") == 0) {
        copy_clean = copy_clean_sse2;
        copy_clean_name = "sse2";
    } else if (strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2")) {
        copy_clean = copy_clean_avx2;
        copy_clean_name = "avx2";
#endif
    } else {
        PyErr_Format(PyExc_ValueError, "block_scan: %s is not available here", name);
        return NULL;
    }
    return PyUnicode_FromString(copy_clean_name);
}

static PyMethodDef methods[] = {
    {"stable_bytes", stable_bytes, METH_O, "stableStringify(value) as UTF-8 bytes, or None where unsure."},
    {"block_scan", block_scan, METH_VARARGS, "block_scan(name=None): the ASCII block scan in use, or use another."},
    {"bind", bind, METH_VARARGS, "bind(number_type, number_text, undefined): JavaScript's number and undefined."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "loopwatch.detectors._stable_bytes",
    .m_doc = "stableStringify in C (see stable_json.py).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__stable_bytes(void) {
#ifdef SIMD
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2");
    copy_clean = avx2 ? copy_clean_avx2 : copy_clean_sse2;
    copy_clean_name = avx2 ? "avx2" : "sse2";
#endif
    return PyModule_Create(&module_def);
}
