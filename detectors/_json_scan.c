/* Two scans of JSON bytes on the path of every event, in C (detectors/json_scan.py holds the
 * same functions in Python, used where this module was not built).
 *
 * opening_brackets(data): how many '[' and '{' bytes ``data`` holds (strings included): an
 *     upper bound of its nesting depth.
 * line_scan(data): the same count, doubled, plus one when ``data`` holds a byte >= 0x80 (not
 *     ASCII): the two facts decode_event needs of every event's JSON, in one pass.
 * longest_text(values, positions): the most code points of a str among ``values`` (a tuple)
 *     at ``positions`` (a tuple of indices): whether an event's ids can be long at all.
 * javascript_safe(out): whether sorted JSON from msgspec is byte-identical to JavaScript's
 *     stableStringify: no run of 16 digits (an integer beyond 2**53 may be one) and no byte
 *     >= 0xEE (a code point >= U+E000, whose UTF-8 order can differ from UTF-16 order).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_byte_scans.h"

static int bytes_argument(PyObject *data, const char *name) {
    if (!PyBytes_Check(data)) {
        PyErr_Format(PyExc_TypeError, "%s() takes bytes, not %.100s", name, Py_TYPE(data)->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *opening_brackets(PyObject *module, PyObject *data) {
    (void)module;
    if (bytes_argument(data, "opening_brackets") < 0) {
        return NULL;
    }
    const unsigned char *start = (const unsigned char *)PyBytes_AS_STRING(data);
    int high;
    return PyLong_FromSsize_t(scan_bytes(start, start + PyBytes_GET_SIZE(data), &high));
}

static PyObject *line_scan(PyObject *module, PyObject *data) {
    (void)module;
    if (bytes_argument(data, "line_scan") < 0) {
        return NULL;
    }
    const unsigned char *start = (const unsigned char *)PyBytes_AS_STRING(data);
    int high;
    Py_ssize_t count = scan_bytes(start, start + PyBytes_GET_SIZE(data), &high);
    return PyLong_FromSsize_t(count * 2 + high);
}

/* Whether none of the 8 bytes of ``word`` is >= 0x80 or an ASCII digit (most words of JSON
 * text): bytes below 0x80 plus 0x50 or 0x46 carry into no neighbour, and their high bits tell
 * which are >= '0' and which are >= ':'. */
static int plain_word(uint64_t word) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    if (word & highs) {
        return 0;
    }
    uint64_t from_zero = (word + ones * (0x80 - '0')) & highs;
    uint64_t past_nine = (word + ones * (0x80 - ':')) & highs;
    return (from_zero & ~past_nine) == 0;
}

/* Advances the digit run over ``count`` bytes; 0 when the bytes break the rule. */
static int safe_bytes(const unsigned char *bytes, Py_ssize_t count, int *digits) {
    for (Py_ssize_t index = 0; index < count; index++) {
        unsigned int byte = bytes[index];
        if (byte >= 0xEE) {
            return 0;
        }
        if (byte - '0' < 10u) {
            if (++*digits >= 16) {
                return 0;
            }
        } else {
            *digits = 0;
        }
    }
    return 1;
}

static PyObject *javascript_safe(PyObject *module, PyObject *out) {
    (void)module;
    if (bytes_argument(out, "javascript_safe") < 0) {
        return NULL;
    }
    const unsigned char *bytes = (const unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t size = PyBytes_GET_SIZE(out), index = 0;
    int digits = 0;
    for (; index + 8 <= size; index += 8) {
        uint64_t word;
        memcpy(&word, bytes + index, sizeof word);
        if (plain_word(word)) {
            digits = 0;
        } else if (!safe_bytes(bytes + index, 8, &digits)) {
            Py_RETURN_FALSE;
        }
    }
    if (!safe_bytes(bytes + index, size - index, &digits)) {
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyObject *longest_text(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "longest_text() takes a tuple of values and a tuple of positions");
        return NULL;
    }
    PyObject *values = args[0], *positions = args[1];
    Py_ssize_t size = PyTuple_GET_SIZE(values), longest = 0;
    for (Py_ssize_t index = 0; index < PyTuple_GET_SIZE(positions); index++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, index));
        if (at == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (at < 0 || at >= size) {
            PyErr_SetString(PyExc_IndexError, "longest_text() position out of range");
            return NULL;
        }
        PyObject *value = PyTuple_GET_ITEM(values, at);
        if (PyUnicode_CheckExact(value) && PyUnicode_GET_LENGTH(value) > longest) {
            longest = PyUnicode_GET_LENGTH(value);
        }
    }
    return PyLong_FromSsize_t(longest);
}

static PyMethodDef methods[] = {
    {"longest_text", (PyCFunction)(void (*)(void))longest_text, METH_FASTCALL,
     "The most code points of a str among values at positions."},
    {"opening_brackets", opening_brackets, METH_O, "How many '[' and '{' bytes data holds."},
    {"line_scan", line_scan, METH_O, "Twice the '[' and '{' bytes of data, plus 1 if it is not ASCII."},
    {"javascript_safe", javascript_safe, METH_O,
     "Whether msgspec's sorted JSON is stableStringify's: no 16-digit run, no byte >= 0xEE."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "loopwatch.detectors._json_scan",
    .m_doc = "Scans of JSON bytes (see json_scan.py).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__json_scan(void) { return PyModule_Create(&module_def); }
