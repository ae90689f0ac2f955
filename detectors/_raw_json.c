/* stableStringify straight from JSON text, for the params and results of wire events
 * (detectors/raw_json.py has the same functions in Python, and says what they are for).
 *
 * canonical(raw) -> bytes | None: the UTF-8 bytes of OpenClaw's stableStringify(JSON.parse(raw))
 * (spec section 3.1), the bytes detectors.stable_json.canonical_bytes gives for the value the
 * wire decoder makes of raw.
 *
 * outcome(raw) -> (bytes, is_object, loop_veto, unchanged) | None: for a tool result's JSON,
 * the canonical bytes it hashes as in the general case of spec section 3.3 - of
 * {"details": details or {}, "text": the trimmed text of its content blocks} for an object, of
 * the value itself for anything else - whether it is an object, whether its details say the
 * detector's own loop veto (status "blocked", deniedReason "tool-loop"), and whether they say
 * changed: false.
 *
 * args_hash(tool, raw) -> str | None: "{tool}:{XXH3-128 hex digest of canonical(raw)}", a call's
 * argsHash under the xxh3 digest, where canonical answers. outcome_hash(raw) -> str | None: the
 * hex digest of outcome(raw)'s bytes where it answers and its details say neither the loop veto
 * nor changed: false (None: ask outcome). Both hash what they have just written, without
 * handing it to Python; a long text (over LONG_TEXT bytes) goes to xxhash.xxh3_128_hexdigest,
 * whose SIMD the CPU chooses.
 *
 * utf8_valid(raw) -> bool: whether raw is valid UTF-8.
 *
 * exec_outcome(raw): a finished exec's fingerprint and what the 2026-08 rules read (see below);
 * exec_hash(raw) -> str | None: the xxh3 digest of that fingerprint where the exec is surely no
 * terminal failure (its exit code no number or 0, or it timed out), else None (ask exec_outcome).
 *
 * split_event(data): a wire event's JSON without the values of params and result (see below).
 *
 * canonical and outcome answer None where they cannot be sure: not valid JSON or not valid UTF-8 (the Python
 * decoder then says what is wrong), a number written with a fraction or an exponent or beyond
 * 2**53 (JavaScript's number text is the Python path's), a lone surrogate escape, an object key
 * outside the Basic Multilingual Plane (its UTF-16 order is not its UTF-8 order), nesting
 * deeper than MAX_DEPTH. The caller then decodes the value and takes the general path.
 *
 * The JSON is read once into a flat tree (nodes in document order, decoded strings in one
 * buffer), then written: object members sorted by key (the last of equal keys kept, as
 * JSON.parse keeps it), strings with JSON.stringify's escapes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include "_vendor/xxhash.h"

#define MAX_DEPTH 32
#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif
#define STACK_NODES 128
#define STACK_TEXT 2048
#define STACK_OUT 1024

enum { J_NULL, J_FALSE, J_TRUE, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT };

/* One value. Strings and numbers: their decoded bytes (a number's canonical text) at ``text``,
 * ``size`` long: inside the JSON itself where they need no decoding (most), else in the tree's
 * buffer of decoded strings. Arrays and objects: ``count`` children (an object's are key,
 * value, key, value...) from the next node on; ``end``: the node after the whole subtree,
 * where the next sibling is. */
typedef struct {
    const char *text;
    uint32_t size, count, end;
    uint8_t kind;
    uint8_t astral; /* a string holding a code point beyond U+FFFF */
    uint8_t plain;  /* a string or number whose JSON text is its canonical text as it stands */
} Node;

/* The decoded strings never outgrow the JSON they come from: their buffer is that large from
 * the first string with an escape on (pointers into it stay valid). */
typedef struct {
    const unsigned char *at, *stop;
    Node *nodes;
    Py_ssize_t n_nodes, cap_nodes;
    char *text;
    Py_ssize_t n_text, json_size;
    int failed; /* a Python error is set (out of memory) */
    Node stack_nodes[STACK_NODES];
    char stack_text[STACK_TEXT];
} Tree;

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
    int heap;
    char stack[STACK_OUT];
} Out;

/* ----- growable buffers ----- */

static int grow_buffer(void **data, Py_ssize_t *capacity, Py_ssize_t need, size_t item, void *stack) {
    Py_ssize_t capacity_now = *capacity * 2;
    while (capacity_now < need) {
        capacity_now *= 2;
    }
    void *grown;
    if (stack != NULL && *data == stack) {
        grown = PyMem_Malloc((size_t)capacity_now * item);
        if (grown != NULL) {
            memcpy(grown, stack, (size_t)*capacity * item);
        }
    } else {
        grown = PyMem_Realloc(*data, (size_t)capacity_now * item);
    }
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *data = grown;
    *capacity = capacity_now;
    return 0;
}

/* The buffer of decoded strings, made on the first string with an escape. */
static int text_buffer(Tree *tree) {
    if (tree->text != NULL) {
        return 0;
    }
    if (tree->json_size <= STACK_TEXT) {
        tree->text = tree->stack_text;
        return 0;
    }
    tree->text = PyMem_Malloc((size_t)tree->json_size);
    if (tree->text == NULL) {
        PyErr_NoMemory();
        tree->failed = 1;
        return -1;
    }
    return 0;
}

static Node *new_node(Tree *tree, int kind) {
    if (tree->n_nodes == tree->cap_nodes) {
        if (tree->n_nodes >= UINT32_MAX ||
            grow_buffer((void **)&tree->nodes, &tree->cap_nodes, tree->n_nodes + 1, sizeof(Node),
                        tree->stack_nodes) < 0) {
            tree->failed = tree->n_nodes < UINT32_MAX;
            return NULL;
        }
    }
    Node *node = &tree->nodes[tree->n_nodes++];
    node->kind = (uint8_t)kind;
    node->astral = 0;
    node->plain = 0;
    node->text = NULL;
    node->size = node->count = node->end = 0;
    return node;
}

/* More room than the output has (the rare case, kept out of the writers' way). */
NOINLINE static int out_grow(Out *out, Py_ssize_t more) {
    if (!out->heap) {
        Py_ssize_t capacity = out->capacity * 2;
        while (capacity < out->size + more) {
            capacity *= 2;
        }
        char *grown = PyMem_Malloc((size_t)capacity);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(grown, out->data, (size_t)out->size);
        out->data = grown;
        out->capacity = capacity;
        out->heap = 1;
        return 0;
    }
    return grow_buffer((void **)&out->data, &out->capacity, out->size + more, 1, NULL);
}

static inline int out_reserve(Out *out, Py_ssize_t more) {
    return out->size + more <= out->capacity ? 0 : out_grow(out, more);
}

static inline int out_put(Out *out, const char *data, Py_ssize_t size) {
    if (out_reserve(out, size) < 0) {
        return -1;
    }
    memcpy(out->data + out->size, data, (size_t)size);
    out->size += size;
    return 0;
}

/* ----- reading ----- */

static inline void skip_space(Tree *tree) {
    while (tree->at < tree->stop &&
           (*tree->at == ' ' || *tree->at == '\n' || *tree->at == '\r' || *tree->at == '\t')) {
        tree->at++;
    }
}

static int hex_digit(unsigned char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int read_hex4(Tree *tree, uint32_t *value) {
    if (tree->stop - tree->at < 4) {
        return -1;
    }
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(tree->at[i]);
        if (d < 0) {
            return -1;
        }
        v = v << 4 | (uint32_t)d;
    }
    tree->at += 4;
    *value = v;
    return 0;
}

static void put_utf8(char *dest, Py_ssize_t *size, uint32_t c) {
    unsigned char *d = (unsigned char *)dest + *size;
    if (c < 0x80) {
        d[0] = (unsigned char)c;
        *size += 1;
    } else if (c < 0x800) {
        d[0] = (unsigned char)(0xC0 | c >> 6);
        d[1] = (unsigned char)(0x80 | (c & 0x3F));
        *size += 2;
    } else if (c < 0x10000) {
        d[0] = (unsigned char)(0xE0 | c >> 12);
        d[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
        d[2] = (unsigned char)(0x80 | (c & 0x3F));
        *size += 3;
    } else {
        d[0] = (unsigned char)(0xF0 | c >> 18);
        d[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
        d[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
        d[3] = (unsigned char)(0x80 | (c & 0x3F));
        *size += 4;
    }
}

/* The length of the valid UTF-8 sequence at ``at`` (no overlong form, no surrogate, at most
 * U+10FFFF), 0 if there is none; ``astral`` set for a four-byte one. */
static int utf8_sequence(const unsigned char *at, const unsigned char *stop, int *astral) {
    unsigned char c = at[0];
    Py_ssize_t left = stop - at;
    if (c >= 0xC2 && c <= 0xDF) {
        return left >= 2 && (at[1] & 0xC0) == 0x80 ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (at[1] & 0xC0) != 0x80 || (at[2] & 0xC0) != 0x80) {
            return 0;
        }
        if ((c == 0xE0 && at[1] < 0xA0) || (c == 0xED && at[1] >= 0xA0)) {
            return 0;
        }
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (at[1] & 0xC0) != 0x80 || (at[2] & 0xC0) != 0x80 || (at[3] & 0xC0) != 0x80) {
            return 0;
        }
        if ((c == 0xF0 && at[1] < 0x90) || (c == 0xF4 && at[1] >= 0x90)) {
            return 0;
        }
        *astral = 1;
        return 4;
    }
    return 0;
}

/* Bytes that stand for themselves in a JSON string and in JSON.stringify's output: printable
 * ASCII but '"' and '\\' (bytes from 0x80 on are UTF-8, checked one sequence at a time). */
static unsigned char PLAIN[256];

static void plain_table(void) {
    for (int c = 0x20; c < 0x80; c++) {
        PLAIN[c] = c != '"' && c != '\\';
    }
}

/* The first byte from ``at`` on that is not PLAIN (``stop`` if none): 16 at a time where SSE2
 * is (every x86-64), one at a time elsewhere and for the tail. */
#if defined(__SSE2__) && defined(__GNUC__) && !defined(LOOPWATCH_PORTABLE)
#include <immintrin.h>
#define SIMD 1

/* 32 bytes at a time where the CPU has AVX2 (chosen when the module loads), for long runs. */
static int have_avx2 = 0;

__attribute__((target("avx2"))) static const unsigned char *plain_run_avx2(const unsigned char *at,
                                                                             const unsigned char *stop) {
    const __m256i quote = _mm256_set1_epi8('"'), backslash = _mm256_set1_epi8('\\'), space = _mm256_set1_epi8(0x20);
    while (stop - at >= 32) {
        __m256i block = _mm256_loadu_si256((const __m256i *)at);
        __m256i special = _mm256_or_si256(_mm256_cmpeq_epi8(block, quote), _mm256_cmpeq_epi8(block, backslash));
        special = _mm256_or_si256(special, _mm256_cmpgt_epi8(space, block));
        unsigned int mask = (unsigned int)_mm256_movemask_epi8(special);
        if (mask) {
            return at + __builtin_ctz(mask);
        }
        at += 32;
    }
    return at;
}

static inline const unsigned char *plain_run(const unsigned char *at, const unsigned char *stop) {
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    if (have_avx2 && stop - at >= 144) { /* a long run: past a first block (most strings end there), 32 at a time */
        __m128i block = _mm_loadu_si128((const __m128i *)at);
        __m128i special = _mm_or_si128(_mm_cmpeq_epi8(block, quote), _mm_cmpeq_epi8(block, backslash));
        unsigned int mask = (unsigned int)_mm_movemask_epi8(_mm_or_si128(special, _mm_cmplt_epi8(block, space)));
        if (mask) {
            return at + __builtin_ctz(mask);
        }
        at = plain_run_avx2(at + 16, stop);
    }
    while (stop - at >= 16) {
        __m128i block = _mm_loadu_si128((const __m128i *)at);
        /* signed: bytes from 0x80 on are below 0x20 too (UTF-8, checked by the caller) */
        __m128i special = _mm_or_si128(_mm_cmpeq_epi8(block, quote), _mm_cmpeq_epi8(block, backslash));
        unsigned int mask = (unsigned int)_mm_movemask_epi8(_mm_or_si128(special, _mm_cmplt_epi8(block, space)));
        if (mask) {
            return at + __builtin_ctz(mask);
        }
        at += 16;
    }
    while (at < stop && PLAIN[*at]) {
        at++;
    }
    return at;
}

/* The first byte from ``at`` on that JSON.stringify escapes ('"', '\\', a control character). */
static inline const unsigned char *unescaped_run(const unsigned char *at, const unsigned char *stop) {
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20),
                  minus_one = _mm_set1_epi8(-1);
    while (stop - at >= 16) {
        __m128i block = _mm_loadu_si128((const __m128i *)at);
        __m128i special = _mm_or_si128(_mm_cmpeq_epi8(block, quote), _mm_cmpeq_epi8(block, backslash));
        __m128i control = _mm_and_si128(_mm_cmplt_epi8(block, space), _mm_cmpgt_epi8(block, minus_one));
        unsigned int mask = (unsigned int)_mm_movemask_epi8(_mm_or_si128(special, control));
        if (mask) {
            return at + __builtin_ctz(mask);
        }
        at += 16;
    }
    while (at < stop && (PLAIN[*at] || *at >= 0x80)) {
        at++;
    }
    return at;
}
#else
static inline const unsigned char *plain_run(const unsigned char *at, const unsigned char *stop) {
    while (at < stop && PLAIN[*at]) {
        at++;
    }
    return at;
}

static inline const unsigned char *unescaped_run(const unsigned char *at, const unsigned char *stop) {
    while (at < stop && (PLAIN[*at] || *at >= 0x80)) {
        at++;
    }
    return at;
}
#endif

/* The code point of a ``\\u`` escape (``*at`` just after its "\\u"), a surrogate pair read
 * whole (``astral`` set): 0, ``*at`` past it; -1 where it is no escape or a lone surrogate
 * (the Python path sanitises those). */
static int unicode_escape(Tree *tree, const unsigned char **at, uint32_t *point, int *astral) {
    const unsigned char *stop = tree->stop;
    uint32_t unit;
    tree->at = *at;
    if (read_hex4(tree, &unit) < 0) {
        return -1;
    }
    if (unit >= 0xD800 && unit <= 0xDBFF) {
        uint32_t low;
        const unsigned char *next = tree->at;
        if (stop - next < 6 || next[0] != '\\' || next[1] != 'u') {
            return -1;
        }
        tree->at = next + 2;
        if (read_hex4(tree, &low) < 0 || low < 0xDC00 || low > 0xDFFF) {
            return -1;
        }
        unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
        *astral = 1;
    } else if (unit >= 0xDC00 && unit <= 0xDFFF) {
        return -1;
    }
    *at = tree->at;
    *point = unit;
    return 0;
}

/* What a one-character escape stands for (0: JSON has no such escape). */
static const char UNESCAPE[128] = {
    ['"'] = '"', ['\\'] = '\\', ['/'] = '/', ['b'] = '\b', ['f'] = '\f', ['n'] = '\n', ['r'] = '\r', ['t'] = '\t',
};

/* The escapes and UTF-8 of a string from ``at`` (after its opening quote, or where its first
 * escape is) to its closing quote, checked, and with ``keep`` decoded into the buffer at
 * ``size`` (without, nothing is written: skip_string). */
static int decode_string(Tree *tree, const unsigned char *at, Py_ssize_t *size, int *astral, int keep) {
    const unsigned char *stop = tree->stop;
    char *text = tree->text;
    Py_ssize_t n = *size;
    for (;;) {
        const unsigned char *run = at;
        at = plain_run(at, stop);
        if (keep) {
            memcpy(text + n, run, (size_t)(at - run));
            n += at - run;
        }
        if (at >= stop) {
            return -1;
        }
        unsigned char c = *at;
        if (c == '"') {
            tree->at = at + 1;
            *size = n;
            return 0;
        }
        if (c >= 0x80) {
            int length = utf8_sequence(at, stop, astral);
            if (length == 0) {
                return -1;
            }
            if (keep) {
                memcpy(text + n, at, (size_t)length);
                n += length;
            }
            at += length;
            continue;
        }
        if (c != '\\' || stop - at < 2) {
            return -1; /* a control character, or the input ends */
        }
        unsigned char e = at[1];
        at += 2;
        if (e == 'u') {
            uint32_t unit;
            if (unicode_escape(tree, &at, &unit, astral) < 0) {
                return -1;
            }
            if (keep) {
                put_utf8(text, &n, unit); /* (never longer than its escape) */
            }
        } else if (e < 128 && UNESCAPE[e]) {
            if (keep) {
                text[n++] = UNESCAPE[e];
            }
        } else {
            return -1;
        }
    }
}

/* A string (``at`` on its opening quote): where it needs no decoding (no escape), the JSON
 * text itself, else decoded into the buffer. */
static int read_string(Tree *tree, Node *node) {
    const unsigned char *start = tree->at + 1, *at = start, *stop = tree->stop;
    int astral = 0;
    for (;;) {
        at = plain_run(at, stop);
        if (at >= stop) {
            return -1;
        }
        if (*at == '"') {
            node->text = (const char *)start;
            node->size = (uint32_t)(at - start);
            node->astral = (uint8_t)astral;
            node->plain = 1;
            tree->at = at + 1;
            return 0;
        }
        if (*at < 0x80) {
            break; /* an escape (or a control character: decode_string refuses it) */
        }
        int length = utf8_sequence(at, stop, &astral);
        if (length == 0) {
            return -1;
        }
        at += length;
    }
    if (text_buffer(tree) < 0) {
        return -1;
    }
    Py_ssize_t begin = tree->n_text, size = begin + (at - start);
    memcpy(tree->text + begin, start, (size_t)(at - start));
    if (decode_string(tree, at, &size, &astral, 1) < 0) {
        return -1;
    }
    node->text = tree->text + begin;
    node->size = (uint32_t)(size - begin);
    node->astral = (uint8_t)astral;
    tree->n_text = size;
    return 0;
}

#define MAX_SAFE "9007199254740992" /* 2**53: JavaScript keeps every integer up to it exactly */

static int is_digit(const Tree *tree) { return tree->at < tree->stop && *tree->at >= '0' && *tree->at <= '9'; }

/* A JSON number. ``plain`` where its text is JavaScript's: an integer within 2**53 ("-0" read
 * as "0", JSON.stringify's text for negative zero); any other (a fraction, an exponent, a
 * larger integer) is read but left to the Python path to write. */
static int read_number(Tree *tree, Node *node) {
    const unsigned char *start = tree->at;
    int negative = 0;
    if (tree->at < tree->stop && *tree->at == '-') {
        negative = 1;
        tree->at++;
    }
    const unsigned char *digits = tree->at;
    if (!is_digit(tree)) {
        return -1;
    }
    if (*tree->at == '0') {
        tree->at++;
    } else {
        while (is_digit(tree)) {
            tree->at++;
        }
    }
    Py_ssize_t length = tree->at - digits;
    int exact = length < 16 || (length == 16 && memcmp(digits, MAX_SAFE, 16) <= 0);
    if (tree->at < tree->stop && *tree->at == '.') {
        tree->at++;
        exact = 0;
        if (!is_digit(tree)) {
            return -1;
        }
        while (is_digit(tree)) {
            tree->at++;
        }
    }
    if (tree->at < tree->stop && (*tree->at == 'e' || *tree->at == 'E')) {
        tree->at++;
        exact = 0;
        if (tree->at < tree->stop && (*tree->at == '+' || *tree->at == '-')) {
            tree->at++;
        }
        if (!is_digit(tree)) {
            return -1;
        }
        while (is_digit(tree)) {
            tree->at++;
        }
    }
    if (negative && length == 1 && digits[0] == '0' && exact) {
        start = digits;
    }
    node->text = (const char *)start;
    node->size = (uint32_t)(tree->at - start);
    node->plain = (uint8_t)exact;
    return 0;
}

static int read_literal(Tree *tree, const char *word, Py_ssize_t size) {
    if (tree->stop - tree->at < size || memcmp(tree->at, word, (size_t)size) != 0) {
        return -1;
    }
    tree->at += size;
    return 0;
}

/* A string (``at`` on its opening quote) checked as read_string checks it (valid UTF-8, no
 * control character, escapes JSON's own and no lone surrogate among them), nothing kept. */
static int skip_string(Tree *tree) {
    Py_ssize_t size = 0;
    int astral = 0;
    return decode_string(tree, tree->at + 1, &size, &astral, 0);
}

/* A new node of the tree, or with ``keep`` 0 the ``scratch`` one (nothing appended). */
static Node *value_node(Tree *tree, int kind, int keep, Node *scratch) {
    if (keep) {
        return new_node(tree, kind);
    }
    scratch->kind = (uint8_t)kind;
    return scratch;
}

/* One value (white space before it skipped by the caller); its node and subtree appended, or
 * with ``keep`` 0 only checked, as it would be read (fast_event: what is hashed later). */
static int read_value(Tree *tree, int depth, int keep) {
    if (tree->at >= tree->stop) {
        return -1;
    }
    unsigned char c = *tree->at;
    Py_ssize_t index = tree->n_nodes;
    Node scratch, *node;
    switch (c) {
    case '"':
        node = value_node(tree, J_STRING, keep, &scratch);
        if (node == NULL || (keep ? read_string(tree, node) : skip_string(tree)) < 0) {
            return -1;
        }
        break;
    case 'n':
        if (value_node(tree, J_NULL, keep, &scratch) == NULL || read_literal(tree, "null", 4) < 0) {
            return -1;
        }
        break;
    case 't':
        if (value_node(tree, J_TRUE, keep, &scratch) == NULL || read_literal(tree, "true", 4) < 0) {
            return -1;
        }
        break;
    case 'f':
        if (value_node(tree, J_FALSE, keep, &scratch) == NULL || read_literal(tree, "false", 5) < 0) {
            return -1;
        }
        break;
    case '[':
    case '{': {
        int object = c == '{';
        uint32_t count = 0;
        if (depth >= MAX_DEPTH || value_node(tree, object ? J_OBJECT : J_ARRAY, keep, &scratch) == NULL) {
            return -1;
        }
        tree->at++;
        skip_space(tree);
        if (tree->at < tree->stop && *tree->at == (object ? '}' : ']')) {
            tree->at++;
            break;
        }
        for (;;) {
            if (object) {
                if (tree->at >= tree->stop || *tree->at != '"') {
                    return -1;
                }
                if (keep) {
                    Node *key = new_node(tree, J_STRING);
                    if (key == NULL || read_string(tree, key) < 0) {
                        return -1;
                    }
                    key->end = (uint32_t)tree->n_nodes;
                } else if (skip_string(tree) < 0) {
                    return -1;
                }
                skip_space(tree);
                if (tree->at >= tree->stop || *tree->at != ':') {
                    return -1;
                }
                tree->at++;
                skip_space(tree);
                count++;
            }
            if (read_value(tree, depth + 1, keep) < 0) {
                return -1;
            }
            count++;
            skip_space(tree);
            if (tree->at < tree->stop && *tree->at == ',') {
                tree->at++;
                skip_space(tree);
                continue;
            }
            if (tree->at < tree->stop && *tree->at == (object ? '}' : ']')) {
                tree->at++;
                break;
            }
            return -1;
        }
        if (keep) {
            tree->nodes[index].count = count;
        }
        break;
    }
    default:
        node = value_node(tree, J_NUMBER, keep, &scratch);
        if (node == NULL || read_number(tree, node) < 0) {
            return -1;
        }
    }
    if (keep) {
        tree->nodes[index].end = (uint32_t)tree->n_nodes;
    }
    return 0;
}

static void tree_init(Tree *tree, const char *data, Py_ssize_t size) {
    tree->at = (const unsigned char *)data;
    tree->stop = tree->at + size;
    tree->nodes = tree->stack_nodes;
    tree->n_nodes = 0;
    tree->cap_nodes = STACK_NODES;
    tree->text = NULL;
    tree->n_text = 0;
    tree->json_size = size;
    tree->failed = 0;
}

static void tree_free(Tree *tree) {
    if (tree->nodes != tree->stack_nodes) {
        PyMem_Free(tree->nodes);
    }
    if (tree->text != NULL && tree->text != tree->stack_text) {
        PyMem_Free(tree->text);
    }
}

/* The whole of ``data`` as one JSON value: 0, or -1 (not sure; ``failed`` if an error is set). */
static int tree_read(Tree *tree, const char *data, Py_ssize_t size) {
    tree_init(tree, data, size);
    skip_space(tree);
    if (read_value(tree, 0, 1) < 0) {
        return -1;
    }
    skip_space(tree);
    return tree->at == tree->stop ? 0 : -1;
}

/* ----- writing ----- */

static const char SHORT_ESCAPE[128] = {
    ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r', ['"'] = '"', ['\\'] = '\\',
};

/* JSON.stringify's text of a decoded UTF-8 string. */
static int write_string(Out *out, const char *text, Py_ssize_t size) {
    static const char hex[] = "0123456789abcdef";
    if (out_reserve(out, size * 6 + 2) < 0) { /* the longest: every byte a \u00xx escape */
        return -1;
    }
    const unsigned char *at = (const unsigned char *)text, *stop = at + size;
    char *d = out->data + out->size;
    *d++ = '"';
    while (at < stop) {
        const unsigned char *run = at;
        at = unescaped_run(at, stop);
        memcpy(d, run, (size_t)(at - run));
        d += at - run;
        if (at == stop) {
            break;
        }
        unsigned char c = *at++;
        if (SHORT_ESCAPE[c]) {
            *d++ = '\\';
            *d++ = SHORT_ESCAPE[c];
        } else {
            memcpy(d, "\\u00", 4);
            d[4] = hex[c >> 4];
            d[5] = hex[c & 15];
            d += 6;
        }
    }
    *d++ = '"';
    out->size = d - out->data;
    return 0;
}

/* A string that needs no escape, quoted. */
static int write_plain(Out *out, const char *text, Py_ssize_t size) {
    if (out_reserve(out, size + 2) < 0) {
        return -1;
    }
    char *d = out->data + out->size;
    d[0] = '"';
    memcpy(d + 1, text, (size_t)size);
    d[size + 1] = '"';
    out->size += size + 2;
    return 0;
}

/* A string node: its JSON text as it is where that is already JSON.stringify's. */
static int write_string_node(Out *out, const Node *node) {
    return node->plain ? write_plain(out, node->text, node->size) : write_string(out, node->text, node->size);
}

#define STACK_MEMBERS 16

typedef struct {
    const char *key;
    uint32_t size, node; /* the key's node; its value is the node after it */
} Member;

static int member_order(const void *a, const void *b) {
    const Member *x = a, *y = b;
    uint32_t common = x->size < y->size ? x->size : y->size;
    int order = memcmp(x->key, y->key, common);
    if (order == 0 && x->size != y->size) {
        order = x->size < y->size ? -1 : 1;
    }
    if (order == 0) { /* equal keys: in document order, the last is kept */
        order = x->node < y->node ? -1 : 1;
    }
    return order;
}

static int write_node(Out *out, const Tree *tree, uint32_t index);

/* An object's members sorted, the last of equal keys only: their count in ``members``, -1
 * where unsure (a key beyond the BMP) or out of memory (``*failed``). */
static Py_ssize_t sorted_members(const Tree *tree, uint32_t index, Member **members, Member *stack,
                                 Py_ssize_t stack_size, int *failed) {
    const Node *node = &tree->nodes[index];
    Py_ssize_t n = node->count / 2;
    Member *list = n <= stack_size ? stack : PyMem_Malloc((size_t)n * sizeof(Member));
    if (list == NULL) {
        PyErr_NoMemory();
        *failed = 1;
        return -1;
    }
    uint32_t child = index + 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Node *key = &tree->nodes[child];
        if (key->astral) {
            if (list != stack) {
                PyMem_Free(list);
            }
            return -1;
        }
        list[i].key = key->text;
        list[i].size = key->size;
        list[i].node = child;
        child = tree->nodes[child + 1].end;
    }
    if (n > 1) {
        if (n <= STACK_MEMBERS) { /* a few members: insertion sort (no call per comparison) */
            for (Py_ssize_t i = 1; i < n; i++) {
                Member item = list[i];
                Py_ssize_t j = i;
                while (j > 0 && member_order(&list[j - 1], &item) > 0) {
                    list[j] = list[j - 1];
                    j--;
                }
                list[j] = item;
            }
        } else {
            qsort(list, (size_t)n, sizeof(Member), member_order);
        }
        Py_ssize_t kept = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i + 1 < n && list[i].size == list[i + 1].size &&
                memcmp(list[i].key, list[i + 1].key, list[i].size) == 0) {
                continue; /* a later one of the same key follows */
            }
            list[kept++] = list[i];
        }
        n = kept;
    }
    *members = list;
    return n;
}


/* 0 written, 1 unsure, -1 error set */
static int write_node(Out *out, const Tree *tree, uint32_t index) {
    const Node *node = &tree->nodes[index];
    switch (node->kind) {
    case J_NULL:
        return out_put(out, "null", 4);
    case J_TRUE:
        return out_put(out, "true", 4);
    case J_FALSE:
        return out_put(out, "false", 5);
    case J_NUMBER:
        return node->plain ? out_put(out, node->text, node->size) : 1; /* (JavaScript's text: Python's) */
    case J_STRING:
        return write_string_node(out, node);
    case J_ARRAY: {
        if (out_put(out, "[", 1) < 0) {
            return -1;
        }
        uint32_t child = index + 1;
        for (uint32_t i = 0; i < node->count; i++) {
            if (i && out_put(out, ",", 1) < 0) {
                return -1;
            }
            int status = write_node(out, tree, child);
            if (status != 0) {
                return status;
            }
            child = tree->nodes[child].end;
        }
        return out_put(out, "]", 1);
    }
    default: {
        Member stack[STACK_MEMBERS], *members;
        int failed = 0;
        Py_ssize_t n = sorted_members(tree, index, &members, stack, STACK_MEMBERS, &failed);
        if (n < 0) {
            return failed ? -1 : 1;
        }
        int status = out_put(out, "{", 1);
        for (Py_ssize_t i = 0; i < n && status == 0; i++) {
            if (i) {
                status = out_put(out, ",", 1);
            }
            if (status == 0) {
                status = write_string_node(out, &tree->nodes[members[i].node]);
            }
            if (status == 0) {
                status = out_put(out, ":", 1);
            }
            if (status == 0) {
                status = write_node(out, tree, members[i].node + 1);
            }
        }
        if (members != stack) {
            PyMem_Free(members);
        }
        return status != 0 ? status : out_put(out, "}", 1);
    }
    }
}

static void out_init(Out *out) {
    out->data = out->stack;
    out->size = 0;
    out->capacity = STACK_OUT;
    out->heap = 0;
}

static PyObject *out_finish(Out *out) {
    PyObject *bytes = PyBytes_FromStringAndSize(out->data, out->size);
    if (out->heap) {
        PyMem_Free(out->data);
    }
    return bytes;
}

static void out_drop(Out *out) {
    if (out->heap) {
        PyMem_Free(out->data);
    }
}

/* ``raw`` (bytes, or anything else holding bytes: msgspec.Raw) read into ``tree``, whose plain
 * strings and numbers point into ``view``: 0 (release ``view`` when done with the tree); 1
 * where it is not sure of it and -1 with an error set (``tree`` and ``view`` then let go). */
static int read_raw(PyObject *raw, Py_buffer *view, Tree *tree) {
    if (PyObject_GetBuffer(raw, view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    if (tree_read(tree, view->buf, view->len) == 0) {
        return 0;
    }
    int failed = tree->failed;
    tree_free(tree);
    PyBuffer_Release(view);
    return failed ? -1 : 1;
}

/* canonical(raw)'s bytes written to ``out`` (initialised here): 0; 1 where unsure, -1 with an
 * error set (``out`` then let go). */
static int write_canonical(PyObject *raw, Out *out) {
    Py_buffer view;
    Tree tree;
    out_init(out);
    int read = read_raw(raw, &view, &tree);
    if (read != 0) {
        return read;
    }
    int status = write_node(out, &tree, 0);
    tree_free(&tree);
    PyBuffer_Release(&view);
    if (status != 0) {
        out_drop(out);
    }
    return status;
}

static PyObject *canonical(PyObject *module, PyObject *raw) {
    (void)module;
    Out out;
    int status = write_canonical(raw, &out);
    if (status != 0) {
        return status < 0 ? NULL : Py_NewRef(Py_None);
    }
    return out_finish(&out);
}

/* The value of the last member ``name`` of the object at ``index``, 0 if it has none. */
static uint32_t member(const Tree *tree, uint32_t index, const char *name) {
    const Node *node = &tree->nodes[index];
    size_t size = strlen(name);
    uint32_t found = 0, child = index + 1;
    for (uint32_t i = 0; i < node->count / 2; i++) {
        const Node *key = &tree->nodes[child];
        if (key->size == size && memcmp(key->text, name, size) == 0) {
            found = child + 1;
        }
        child = tree->nodes[child + 1].end;
    }
    return found;
}

static int is_string(const Tree *tree, uint32_t index, const char *text) {
    if (index == 0 || tree->nodes[index].kind != J_STRING) {
        return 0;
    }
    const Node *node = &tree->nodes[index];
    size_t size = strlen(text);
    return node->size == size && memcmp(node->text, text, size) == 0;
}

/* JavaScript's white space and line terminators (String.prototype.trim) at ``at``: its UTF-8
 * length, 0 if it is none. */
static int js_space(const unsigned char *at, const unsigned char *stop) {
    unsigned char c = at[0];
    if (c == ' ' || (c >= '\t' && c <= '\r')) {
        return 1;
    }
    if (c == 0xC2 && stop - at >= 2 && at[1] == 0xA0) {
        return 2;
    }
    if (stop - at < 3) {
        return 0;
    }
    uint32_t point = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(at[1] & 0x3F) << 6 | (at[2] & 0x3F);
    if (c < 0xE1 || c > 0xEF) {
        return 0;
    }
    if (point == 0x1680 || (point >= 0x2000 && point <= 0x200A) || point == 0x2028 || point == 0x2029 ||
        point == 0x202F || point == 0x205F || point == 0x3000 || point == 0xFEFF) {
        return 3;
    }
    return 0;
}

/* ``text`` without JavaScript's white space at either end (valid UTF-8 in, so a code point
 * ending at ``stop`` starts at most three bytes before it). */
static void js_trim(const char **text, Py_ssize_t *size) {
    const unsigned char *at = (const unsigned char *)*text, *stop = at + *size;
    int length;
    while (at < stop && (length = js_space(at, stop)) > 0) {
        at += length;
    }
    while (stop > at) {
        const unsigned char *last = stop - 1;
        while (last > at && (*last & 0xC0) == 0x80) {
            last--;
        }
        if (js_space(last, stop) != stop - last) {
            break;
        }
        stop = last;
    }
    *text = (const char *)at;
    *size = stop - at;
}

/* The text of a result's content blocks (OpenClaw's extractTextContent): the ``text`` of each
 * object block whose ``type`` and ``text`` are strings, joined by newlines, trimmed. ``plain``:
 * it is one block's JSON text (no escape to write again); several are joined in ``joined``. */
static int content_text(const Tree *tree, uint32_t content, Out *joined, const char **text, Py_ssize_t *size,
                        int *plain) {
    *text = "";
    *size = 0;
    *plain = 0;
    if (content == 0 || tree->nodes[content].kind != J_ARRAY) {
        return 0;
    }
    uint32_t child = content + 1, found = 0;
    const Node *first = NULL;
    for (uint32_t i = 0; i < tree->nodes[content].count; i++) {
        if (tree->nodes[child].kind == J_OBJECT) {
            uint32_t kind = member(tree, child, "type"), part = member(tree, child, "text");
            if (kind && tree->nodes[kind].kind == J_STRING && part && tree->nodes[part].kind == J_STRING) {
                const Node *node = &tree->nodes[part];
                if (found == 1 && out_put(joined, first->text, first->size) < 0) {
                    return -1;
                }
                if (found >= 1 && (out_put(joined, "\n", 1) < 0 || out_put(joined, node->text, node->size) < 0)) {
                    return -1;
                }
                first = found == 0 ? node : first;
                found++;
            }
        }
        child = tree->nodes[child].end;
    }
    if (found == 1) {
        *text = first->text;
        *size = first->size;
        *plain = first->plain;
    } else if (found > 1) {
        *text = joined->data;
        *size = joined->size;
    }
    js_trim(text, size); /* (a plain text stays plain: no white space it may lose is escaped) */
    return 0;
}

/* outcome(raw)'s bytes written to ``out`` (initialised here), with what it says in
 * ``is_object``, ``veto`` and ``unchanged``: 0; 1 where unsure, -1 with an error set (``out``
 * then let go). */
static int write_outcome(PyObject *raw, Out *out, int *is_object, int *veto, int *unchanged) {
    Py_buffer view;
    Tree tree;
    out_init(out);
    *veto = *unchanged = 0;
    int read = read_raw(raw, &view, &tree);
    if (read != 0) {
        return read;
    }
    Out joined;
    out_init(&joined);
    int status;
    *is_object = tree.nodes[0].kind == J_OBJECT;
    if (!*is_object) {
        status = write_node(out, &tree, 0);
    } else {
        uint32_t details = member(&tree, 0, "details");
        const char *text;
        Py_ssize_t text_size;
        int plain;
        status = content_text(&tree, member(&tree, 0, "content"), &joined, &text, &text_size, &plain);
        if (status == 0) {
            status = out_put(out, "{\"details\":", 11);
        }
        if (status == 0) {
            if (details != 0 && tree.nodes[details].kind == J_OBJECT) {
                *veto = is_string(&tree, member(&tree, details, "status"), "blocked") &&
                        is_string(&tree, member(&tree, details, "deniedReason"), "tool-loop");
                uint32_t changed = member(&tree, details, "changed");
                *unchanged = changed != 0 && tree.nodes[changed].kind == J_FALSE;
                status = write_node(out, &tree, details);
            } else {
                status = out_put(out, "{}", 2);
            }
        }
        if (status == 0) {
            status = out_put(out, ",\"text\":", 8);
        }
        if (status == 0) {
            status = plain ? write_plain(out, text, text_size) : write_string(out, text, text_size);
        }
        if (status == 0) {
            status = out_put(out, "}", 1);
        }
    }
    tree_free(&tree);
    PyBuffer_Release(&view);
    out_drop(&joined);
    if (status != 0) {
        out_drop(out);
    }
    return status;
}

static PyObject *hashed(PyObject *prefix, Out *out);

/* outcome(raw), or with ``digest_only`` outcome_hash(raw). */
static PyObject *outcome_answer(PyObject *raw, int digest_only) {
    Out out;
    int is_object, veto, unchanged;
    int status = write_outcome(raw, &out, &is_object, &veto, &unchanged);
    if (status != 0) {
        return status < 0 ? NULL : Py_NewRef(Py_None);
    }
    if (digest_only) {
        if (is_object && (veto || unchanged)) { /* what the caller reads of it: outcome() says */
            out_drop(&out);
            Py_RETURN_NONE;
        }
        return hashed(NULL, &out);
    }
    PyObject *bytes = out_finish(&out);
    if (bytes == NULL) {
        return NULL;
    }
    PyObject *answer = PyTuple_New(4);
    if (answer == NULL) {
        Py_DECREF(bytes);
        return NULL;
    }
    PyTuple_SET_ITEM(answer, 0, bytes);
    PyTuple_SET_ITEM(answer, 1, Py_NewRef(is_object ? Py_True : Py_False));
    PyTuple_SET_ITEM(answer, 2, Py_NewRef(veto ? Py_True : Py_False));
    PyTuple_SET_ITEM(answer, 3, Py_NewRef(unchanged ? Py_True : Py_False));
    return answer;
}

static PyObject *outcome(PyObject *module, PyObject *raw) {
    (void)module;
    return outcome_answer(raw, 0);
}

/* ----- digests of what was written ----- */

/* Longer texts are hashed by xxhash.xxh3_128_hexdigest (SIMD chosen for the CPU at hand; the
 * inlined XXH3 here is built for the baseline, SSE2 on x86-64, and short texts never reach
 * its vector loop anyway). */
#define LONG_TEXT 2048
static PyObject *long_hasher = NULL;

/* ``prefix`` (an ASCII or any str; NULL: none) and ":" before the XXH3-128 hex digest of the
 * written bytes (python-xxhash's hexdigest: the canonical, big-endian form); ``out`` let go. */
static PyObject *hashed(PyObject *prefix, Out *out) {
    static const char hex[] = "0123456789abcdef";
    char digest[32];
    PyObject *text = NULL;
    if (out->size > LONG_TEXT && long_hasher != NULL) {
        PyObject *bytes = out_finish(out);
        if (bytes == NULL) {
            return NULL;
        }
        text = PyObject_CallOneArg(long_hasher, bytes);
        Py_DECREF(bytes);
        if (text == NULL || prefix == NULL) {
            return text;
        }
        PyObject *joined = PyUnicode_FromFormat("%U:%U", prefix, text);
        Py_DECREF(text);
        return joined;
    }
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits(out->data, (size_t)out->size));
    out_drop(out);
    for (int i = 0; i < 16; i++) {
        digest[2 * i] = hex[canonical.digest[i] >> 4];
        digest[2 * i + 1] = hex[canonical.digest[i] & 15];
    }
    if (prefix == NULL) {
        return PyUnicode_FromStringAndSize(digest, 32);
    }
    if (!PyUnicode_IS_COMPACT_ASCII(prefix)) {
        return PyUnicode_FromFormat("%U:%.32s", prefix, digest);
    }
    Py_ssize_t size = PyUnicode_GET_LENGTH(prefix);
    text = PyUnicode_New(size + 33, 127);
    if (text == NULL) {
        return NULL;
    }
    char *at = (char *)PyUnicode_DATA(text);
    memcpy(at, PyUnicode_DATA(prefix), (size_t)size);
    at[size] = ':';
    memcpy(at + size + 1, digest, 32);
    return text;
}

static PyObject *args_hash(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "args_hash() takes a tool name (str) and a JSON text");
        return NULL;
    }
    Out out;
    int status = write_canonical(args[1], &out);
    if (status != 0) {
        return status < 0 ? NULL : Py_NewRef(Py_None);
    }
    return hashed(args[0], &out);
}

static PyObject *outcome_hash(PyObject *module, PyObject *raw) {
    (void)module;
    return outcome_answer(raw, 1);
}

/* exec_outcome(raw) -> (bytes, status, exit_code, timed_out, output) | None: for the result
 * of an ``exec`` whose details say it finished (status "completed" or "failed"), the
 * canonical bytes of the fingerprint it hashes as (spec section 3.3: {exitCode, output,
 * status, timedOut}), its status, its exit code (an int; None where it is no number), whether
 * it timed out and its output (the trimmed aggregated output, else the text of its content),
 * which the terminal-failure rule of revision 2026-08 reads. None for any other result, and
 * where unsure (an exit code written with a fraction or an exponent, or beyond 2**53).
 * exec_outcome(raw) that, or with ``digest_only`` the hex digest of its fingerprint where it is no
 * terminal failure (the exit code no number or 0, or timed out), None where it may be one. */
static PyObject *finished_exec(PyObject *raw, int digest_only) {
    Py_buffer view;
    Tree tree;
    int read = read_raw(raw, &view, &tree);
    if (read != 0) {
        return read < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *answer = NULL;
    uint32_t details = 0, status = 0;
    if (tree.nodes[0].kind == J_OBJECT) {
        details = member(&tree, 0, "details");
        if (details != 0 && tree.nodes[details].kind == J_OBJECT) {
            status = member(&tree, details, "status");
        }
    }
    if (!is_string(&tree, status, "completed") && !is_string(&tree, status, "failed")) {
        tree_free(&tree);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    uint32_t code = member(&tree, details, "exitCode"), timed = member(&tree, details, "timedOut");
    uint32_t aggregated = member(&tree, details, "aggregated");
    int is_number = code != 0 && tree.nodes[code].kind == J_NUMBER;
    if (is_number && !tree.nodes[code].plain) {
        tree_free(&tree);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    int timed_out = timed != 0 && tree.nodes[timed].kind == J_TRUE;
    const char *output = "";
    Py_ssize_t output_size = 0;
    int plain = 0;
    Out out, joined;
    out_init(&out);
    out_init(&joined);
    if (aggregated != 0 && tree.nodes[aggregated].kind == J_STRING) {
        output = tree.nodes[aggregated].text;
        output_size = tree.nodes[aggregated].size;
        plain = tree.nodes[aggregated].plain;
        js_trim(&output, &output_size);
    }
    int status_code = 0;
    if (output_size == 0) {
        status_code = content_text(&tree, member(&tree, 0, "content"), &joined, &output, &output_size, &plain);
    }
    const Node *code_node = is_number ? &tree.nodes[code] : NULL;
    if (status_code == 0) {
        status_code = out_put(&out, "{\"exitCode\":", 12);
    }
    if (status_code == 0) {
        status_code = code_node ? out_put(&out, code_node->text, code_node->size) : out_put(&out, "null", 4);
    }
    if (status_code == 0) {
        status_code = out_put(&out, ",\"output\":", 10);
    }
    if (status_code == 0) {
        status_code = plain ? write_plain(&out, output, output_size) : write_string(&out, output, output_size);
    }
    if (status_code == 0) {
        status_code = out_put(&out, ",\"status\":", 10);
    }
    if (status_code == 0) {
        status_code = write_string_node(&out, &tree.nodes[status]);
    }
    if (status_code == 0) {
        status_code = timed_out ? out_put(&out, ",\"timedOut\":true}", 17) : out_put(&out, ",\"timedOut\":false}", 18);
    }
    int maybe_failure = code_node != NULL && !(code_node->size == 1 && code_node->text[0] == '0') && !timed_out;
    if (status_code == 0 && digest_only) {
        out_drop(&joined);
        tree_free(&tree);
        PyBuffer_Release(&view);
        if (maybe_failure) {
            out_drop(&out);
            Py_RETURN_NONE;
        }
        return hashed(NULL, &out);
    }
    if (status_code == 0) {
        PyObject *bytes = PyBytes_FromStringAndSize(out.data, out.size);
        PyObject *status_text = PyUnicode_DecodeUTF8(tree.nodes[status].text, tree.nodes[status].size, "strict");
        PyObject *exit_code = NULL;
        if (code_node != NULL) {
            char digits[24];
            memcpy(digits, code_node->text, code_node->size); /* (at most 17 characters: within 2**53) */
            digits[code_node->size] = 0;
            exit_code = PyLong_FromString(digits, NULL, 10);
        } else {
            exit_code = Py_NewRef(Py_None);
        }
        PyObject *output_text = PyUnicode_DecodeUTF8(output, output_size, "strict");
        if (bytes && status_text && exit_code && output_text) {
            answer = PyTuple_Pack(5, bytes, status_text, exit_code, timed_out ? Py_True : Py_False, output_text);
        }
        Py_XDECREF(bytes);
        Py_XDECREF(status_text);
        Py_XDECREF(exit_code);
        Py_XDECREF(output_text);
    }
    out_drop(&out);
    out_drop(&joined);
    tree_free(&tree);
    PyBuffer_Release(&view);
    return answer;
}

/* ----- fast_event: a common call or result read straight into its Struct ----- */

/* The fields fast_event reads, in the order their keyword names are passed; a call has no
 * result, a result no known_poll. */
enum { F_EVENT_ID, F_RUN_ID, F_SESSION_ID, F_AGENT_ID, F_TS, F_TOOL, F_TOOL_CALL_ID, F_PARAMS, F_RESULT,
       F_KNOWN_POLL, N_FIELDS };
static const char *const FIELD_NAMES[N_FIELDS] = {
    "event_id", "run_id", "session_id", "agent_id", "ts", "tool", "tool_call_id", "params", "result", "known_poll",
};
#define MAX_PLAIN_ID 512 /* input_limits.MAX_ID_BYTES */
#define MAX_TS_DIGITS 15 /* within 2**53, far within int64 */

static PyObject *event_types[2] = {NULL, NULL}; /* ToolCall, ToolResult (bind_events) */
static PyObject *raw_type = NULL;               /* msgspec.Raw */
static PyObject *field_names[N_FIELDS];
static PyObject *kwnames_cache[2][1 << N_FIELDS];
/* The last string read of each id field but event_id: a run's events come together and name
 * the same run, agent and tool, a result its call's id; the same text is the same str again
 * (no new object, and its hash, asked for by every dict the step looks it up in, is known). */
static PyObject *recent_texts[N_FIELDS];

/* A key or a string value that is plain printable ASCII (no escape, no byte from 0x80 on):
 * ``at`` on its opening quote; its text and size, the input after its closing quote. */
static int plain_ascii(const unsigned char **at, const unsigned char *stop, const unsigned char **text,
                       Py_ssize_t *size) {
    const unsigned char *start = *at + 1, *end = plain_run(start, stop);
    if (end >= stop || *end != '"') {
        return -1; /* an escape, a control character, a byte from 0x80 on, or no end */
    }
    *text = start;
    *size = end - start;
    *at = end + 1;
    return 0;
}

static int field_of(const unsigned char *key, Py_ssize_t size) {
    for (int i = 0; i < N_FIELDS; i++) {
        if ((size_t)size == strlen(FIELD_NAMES[i]) && memcmp(key, FIELD_NAMES[i], (size_t)size) == 0) {
            return i;
        }
    }
    return -1;
}

static PyObject *kwnames_for(int kind, unsigned int mask) {
    PyObject *names = kwnames_cache[kind][mask];
    if (names != NULL) {
        return names;
    }
    Py_ssize_t n = 0;
    for (int i = 0; i < N_FIELDS; i++) {
        n += (mask >> i) & 1;
    }
    names = PyTuple_New(n);
    if (names == NULL) {
        return NULL;
    }
    for (int i = 0, j = 0; i < N_FIELDS; i++) {
        if ((mask >> i) & 1) {
            PyTuple_SET_ITEM(names, j++, Py_NewRef(field_names[i]));
        }
    }
    kwnames_cache[kind][mask] = names; /* (kept: at most 2 * 2**N_FIELDS small tuples) */
    return names;
}

/* Whether a run id or session id names something: not blank (the plain ASCII of fast_event
 * is blank only as spaces). */
static int named(PyObject *value) {
    if (value == NULL || value == Py_None) {
        return 0;
    }
    const char *text = (const char *)PyUnicode_DATA(value);
    for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(value); i++) {
        if (text[i] != ' ') {
            return 1;
        }
    }
    return 0;
}

/* fast_event(data) -> ToolCall | ToolResult | None: the event decode_event(data, texts=True)
 * gives, for the common shape it can be sure of without msgspec: a JSON object whose keys are
 * plain ASCII, each at most once, all of them among "type" ("tool_call" or "tool_result"),
 * event_id, run_id, session_id, agent_id, tool, tool_call_id (plain printable ASCII strings
 * of at most MAX_PLAIN_ID bytes, or null where the field may be None), ts (null or an integer
 * of at most MAX_TS_DIGITS digits), params and, for a result, result (any JSON the tree reader
 * takes: valid JSON and UTF-8, at most MAX_DEPTH deep; kept as msgspec.Raw of their text),
 * known_poll (true or false, a call's); and valid as validate_event would find it (an
 * event_id and a tool, a run_id or session_id that is not blank, params, and a result's
 * result). None for anything else: decode_event then reads the event as it always did. */
static PyObject *fast_event(PyObject *module, PyObject *data) {
    (void)module;
    if (event_types[0] == NULL || !PyBytes_Check(data)) {
        Py_RETURN_NONE;
    }
    const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(data);
    Tree tree;
    tree_init(&tree, (const char *)base, PyBytes_GET_SIZE(data));
    const unsigned char *stop = tree.stop;
    PyObject *values[N_FIELDS] = {NULL};
    unsigned int mask = 0;
    int kind = -1, sure = 0, failed = 0;
    skip_space(&tree);
    if (tree.at >= stop || *tree.at != '{') {
        goto done;
    }
    tree.at++;
    skip_space(&tree);
    if (tree.at < stop && *tree.at == '}') {
        goto done;
    }
    for (;;) {
        const unsigned char *key, *text;
        Py_ssize_t key_size, size;
        if (tree.at >= stop || *tree.at != '"' || plain_ascii(&tree.at, stop, &key, &key_size) < 0) {
            goto done;
        }
        skip_space(&tree);
        if (tree.at >= stop || *tree.at != ':') {
            goto done;
        }
        tree.at++;
        skip_space(&tree);
        if (tree.at >= stop) {
            goto done;
        }
        if (key_size == 4 && memcmp(key, "type", 4) == 0) {
            if (kind >= 0 || *tree.at != '"' || plain_ascii(&tree.at, stop, &text, &size) < 0) {
                goto done;
            }
            if (size == 9 && memcmp(text, "tool_call", 9) == 0) {
                kind = 0;
            } else if (size == 11 && memcmp(text, "tool_result", 11) == 0) {
                kind = 1;
            } else {
                goto done;
            }
        } else {
            int field = field_of(key, key_size);
            if (field < 0 || (mask >> field) & 1) {
                goto done; /* a field it does not read, or one given twice */
            }
            unsigned char c = *tree.at;
            PyObject *value = NULL;
            if (field == F_PARAMS || field == F_RESULT) {
                const unsigned char *start = tree.at;
                if (read_value(&tree, 0, 0) < 0) { /* (checked here, read again when hashed) */
                    goto done;
                }
                PyObject *text_bytes = PyBytes_FromStringAndSize((const char *)start, tree.at - start);
                if (text_bytes == NULL) {
                    failed = 1;
                    goto done;
                }
                value = PyObject_CallOneArg(raw_type, text_bytes);
                Py_DECREF(text_bytes);
            } else if (field == F_KNOWN_POLL) {
                if (read_literal(&tree, "true", 4) == 0) {
                    value = Py_NewRef(Py_True);
                } else if (read_literal(&tree, "false", 5) == 0) {
                    value = Py_NewRef(Py_False);
                } else {
                    goto done;
                }
            } else if (c == 'n') {
                if ((field != F_RUN_ID && field != F_SESSION_ID && field != F_TOOL_CALL_ID && field != F_TS) ||
                    read_literal(&tree, "null", 4) < 0) {
                    goto done;
                }
                value = Py_NewRef(Py_None);
            } else if (field == F_TS) {
                const unsigned char *start = tree.at, *digits = start + (c == '-');
                const unsigned char *end = digits;
                while (end < stop && *end >= '0' && *end <= '9') {
                    end++;
                }
                Py_ssize_t count = end - digits;
                if (count == 0 || count > MAX_TS_DIGITS || (count > 1 && *digits == '0') ||
                    (end < stop && (*end == '.' || *end == 'e' || *end == 'E'))) {
                    goto done;
                }
                long long number = 0;
                for (const unsigned char *d = digits; d < end; d++) {
                    number = number * 10 + (*d - '0');
                }
                tree.at = end;
                value = PyLong_FromLongLong(c == '-' ? -number : number);
            } else {
                if (c != '"' || plain_ascii(&tree.at, stop, &text, &size) < 0 || size > MAX_PLAIN_ID) {
                    goto done;
                }
                PyObject *last = recent_texts[field];
                if (last != NULL && PyUnicode_GET_LENGTH(last) == size &&
                    memcmp(PyUnicode_DATA(last), text, (size_t)size) == 0) {
                    value = Py_NewRef(last); /* (the same str again: its hash is known already) */
                } else if ((value = PyUnicode_New(size, 127)) != NULL) {
                    memcpy(PyUnicode_DATA(value), text, (size_t)size);
                    if (field != F_EVENT_ID) {
                        Py_XSETREF(recent_texts[field], Py_NewRef(value));
                    }
                }
            }
            if (value == NULL) {
                failed = 1;
                goto done;
            }
            values[field] = value;
            mask |= 1u << field;
        }
        skip_space(&tree);
        if (tree.at < stop && *tree.at == ',') {
            tree.at++;
            skip_space(&tree);
            continue;
        }
        if (tree.at < stop && *tree.at == '}') {
            tree.at++;
            break;
        }
        goto done;
    }
    skip_space(&tree);
    sure = tree.at == stop && kind >= 0 && values[F_EVENT_ID] != NULL && PyUnicode_GET_LENGTH(values[F_EVENT_ID]) > 0 &&
           values[F_TOOL] != NULL && PyUnicode_GET_LENGTH(values[F_TOOL]) > 0 && values[F_PARAMS] != NULL &&
           (named(values[F_RUN_ID]) || named(values[F_SESSION_ID])) &&
           (kind == 1 ? values[F_RESULT] != NULL && values[F_KNOWN_POLL] == NULL : values[F_RESULT] == NULL);
done:
    tree_free(&tree);
    PyObject *event = NULL;
    if (sure) {
        PyObject *names = kwnames_for(kind, mask);
        PyObject *args[N_FIELDS];
        Py_ssize_t n = 0;
        for (int i = 0; i < N_FIELDS; i++) {
            if (values[i] != NULL) {
                args[n++] = values[i];
            }
        }
        event = names == NULL ? NULL : PyObject_Vectorcall(event_types[kind], args, 0, names);
        failed = event == NULL;
    }
    for (int i = 0; i < N_FIELDS; i++) {
        Py_XDECREF(values[i]);
    }
    if (failed) {
        return NULL; /* (out of memory: an error is set) */
    }
    return event != NULL ? event : Py_NewRef(Py_None);
}

/* bind_events(ToolCall, ToolResult, Raw): the types fast_event builds (until bound: None). */
static PyObject *bind_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyType_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "bind_events() takes the ToolCall, ToolResult and Raw types");
        return NULL;
    }
    for (int i = 0; i < N_FIELDS; i++) {
        if (field_names[i] == NULL && (field_names[i] = PyUnicode_InternFromString(FIELD_NAMES[i])) == NULL) {
            return NULL;
        }
    }
    for (int i = 0; i < 2; i++) {
        Py_XSETREF(event_types[i], Py_NewRef(args[i]));
        for (unsigned int mask = 0; mask < (1u << N_FIELDS); mask++) {
            Py_CLEAR(kwnames_cache[i][mask]);
        }
    }
    Py_XSETREF(raw_type, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

static PyObject *exec_outcome(PyObject *module, PyObject *raw) {
    (void)module;
    return finished_exec(raw, 0);
}

static PyObject *exec_hash(PyObject *module, PyObject *raw) {
    (void)module;
    return finished_exec(raw, 1);
}

#define MAX_CUTS 8

/* split_event(data) -> (envelope, params_start, params_end, result_start, result_end) | None:
 * for a wire event's JSON (an object), the same JSON with the values of its members "params"
 * and "result" (each occurrence) written as null, and where the last of each was (-1: none).
 * Every member's value is read as canonical() reads it (valid JSON and UTF-8, nesting at most
 * MAX_DEPTH deep), so msgspec need not skip the long ones (it skips a byte at a time). None
 * where it cannot say: not such an object, a key with an escape or beyond ASCII, a value it
 * cannot read, more than MAX_CUTS such members. */
static PyObject *split_event(PyObject *module, PyObject *data) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *base = view.buf;
    Tree tree;
    tree_init(&tree, view.buf, view.len);
    Py_ssize_t cuts[MAX_CUTS][2], n_cuts = 0, found[2][2] = {{-1, -1}, {-1, -1}};
    int sure = 0;
    skip_space(&tree);
    if (tree.at < tree.stop && *tree.at == '{') {
        tree.at++;
        skip_space(&tree);
        int empty = tree.at < tree.stop && *tree.at == '}';
        if (empty) {
            tree.at++;
        }
        while (!empty) {
            if (tree.at >= tree.stop || *tree.at != '"') {
                break;
            }
            const unsigned char *key = tree.at + 1, *close = key;
            while (close < tree.stop && PLAIN[*close]) {
                close++;
            }
            if (close >= tree.stop || *close != '"') {
                break; /* an escape, a byte beyond ASCII or the end: not this function's */
            }
            Py_ssize_t key_size = close - key;
            tree.at = close + 1;
            skip_space(&tree);
            if (tree.at >= tree.stop || *tree.at != ':') {
                break;
            }
            tree.at++;
            skip_space(&tree);
            Py_ssize_t start = tree.at - base;
            if (read_value(&tree, 1, 0) < 0) { /* (checked only: hashed later from the text) */
                break;
            }
            Py_ssize_t end = tree.at - base;
            int which = key_size == 6 && memcmp(key, "params", 6) == 0   ? 0
                        : key_size == 6 && memcmp(key, "result", 6) == 0 ? 1
                                                                         : -1;
            if (which >= 0) {
                if (n_cuts == MAX_CUTS) {
                    break;
                }
                cuts[n_cuts][0] = start;
                cuts[n_cuts][1] = end;
                n_cuts++;
                found[which][0] = start;
                found[which][1] = end;
            }
            skip_space(&tree);
            if (tree.at < tree.stop && *tree.at == ',') {
                tree.at++;
                skip_space(&tree);
                continue;
            }
            if (tree.at < tree.stop && *tree.at == '}') {
                tree.at++;
                skip_space(&tree);
                sure = tree.at == tree.stop;
            }
            break;
        }
        if (empty) {
            skip_space(&tree);
            sure = tree.at == tree.stop;
        }
    }
    int failed = tree.failed;
    tree_free(&tree);
    if (!sure) {
        PyBuffer_Release(&view);
        if (failed) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    Py_ssize_t size = view.len;
    for (Py_ssize_t i = 0; i < n_cuts; i++) {
        size -= cuts[i][1] - cuts[i][0] - 4;
    }
    PyObject *envelope = PyBytes_FromStringAndSize(NULL, size);
    if (envelope == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(envelope);
    Py_ssize_t from = 0;
    for (Py_ssize_t i = 0; i < n_cuts; i++) {
        memcpy(out, base + from, (size_t)(cuts[i][0] - from));
        out += cuts[i][0] - from;
        memcpy(out, "null", 4);
        out += 4;
        from = cuts[i][1];
    }
    memcpy(out, base + from, (size_t)(view.len - from));
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nnnnn)", envelope, found[0][0], found[0][1], found[1][0], found[1][1]);
}

/* Whether ``raw`` is valid UTF-8 (what Python's UTF-8 decoder takes): ASCII 8 bytes at a time. */
static PyObject *utf8_valid(PyObject *module, PyObject *raw) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *at = view.buf, *stop = at + view.len;
    int valid = 1, astral = 0;
    while (at < stop) {
        if (stop - at >= 8) {
            uint64_t word;
            memcpy(&word, at, sizeof word);
            if ((word & 0x8080808080808080ULL) == 0) {
                at += 8;
                continue;
            }
        }
        if (*at < 0x80) {
            at++;
            continue;
        }
        int length = utf8_sequence(at, stop, &astral);
        if (length == 0) {
            valid = 0;
            break;
        }
        at += length;
    }
    PyBuffer_Release(&view);
    return Py_NewRef(valid ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"canonical", canonical, METH_O, "stableStringify of a JSON text's value as UTF-8 bytes, or None where unsure."},
    {"outcome", outcome, METH_O,
     "A result's canonical outcome bytes with (is_object, loop_veto, unchanged), or None where unsure."},
    {"args_hash", (PyCFunction)(void (*)(void))args_hash, METH_FASTCALL,
     "A call's argsHash under the xxh3 digest from its params' JSON text, or None where unsure."},
    {"outcome_hash", outcome_hash, METH_O,
     "The xxh3 hex digest of outcome()'s bytes, or None where unsure or its details say more."},
    {"utf8_valid", utf8_valid, METH_O, "Whether the bytes are valid UTF-8."},
    {"exec_outcome", exec_outcome, METH_O, "A finished exec result's fingerprint bytes, status, exit code, timeout, output."},
    {"exec_hash", exec_hash, METH_O,
     "The xxh3 hex digest of a finished exec's fingerprint where it is no terminal failure, else None."},
    {"fast_event", fast_event, METH_O, "A common call or result read straight into its Struct, or None."},
    {"bind_events", (PyCFunction)(void (*)(void))bind_events, METH_FASTCALL,
     "The ToolCall, ToolResult and Raw types fast_event builds."},
    {"split_event", split_event, METH_O, "An event's JSON with params and result as null, and where they were."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "loopwatch.detectors._raw_json",
    .m_doc = "stableStringify straight from JSON text (see raw_json.py).",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__raw_json(void) {
    plain_table();
#ifdef SIMD
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2");
#endif
    PyObject *xxhash = PyImport_ImportModule("xxhash");
    if (xxhash != NULL) {
        long_hasher = PyObject_GetAttrString(xxhash, "xxh3_128_hexdigest");
        Py_DECREF(xxhash);
    }
    if (long_hasher == NULL) { /* (every text is then hashed here: the same digest) */
        PyErr_Clear();
    }
    return PyModule_Create(&module_def);
}
