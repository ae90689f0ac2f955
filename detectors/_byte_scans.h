/* Shared by _json_scan.c and _raw_json.c (each includes it once; every function static). */
#ifndef LOOPWATCH_BYTE_SCANS_H
#define LOOPWATCH_BYTE_SCANS_H

/* The '[' and '{' bytes from ``at`` to ``stop``, and whether one of them is >= 0x80 (``high``):
 * 16 bytes at a time where SSE2 is (every x86-64), one at a time elsewhere and for the tail. */
#if defined(__SSE2__) && defined(__GNUC__) && !defined(LOOPWATCH_PORTABLE)
#include <emmintrin.h>
static Py_ssize_t scan_bytes(const unsigned char *at, const unsigned char *stop, int *high) {
    Py_ssize_t count = 0;
    const __m128i square = _mm_set1_epi8('['), curly = _mm_set1_epi8('{'), zero = _mm_setzero_si128();
    __m128i seen = zero;
    while (stop - at >= 16) {
        /* per byte lane, how many brackets (each match is -1: subtracted), summed every 255 blocks */
        __m128i lanes = zero;
        for (int blocks = 0; blocks < 255 && stop - at >= 16; blocks++, at += 16) {
            __m128i block = _mm_loadu_si128((const __m128i *)at);
            seen = _mm_or_si128(seen, block);
            lanes = _mm_sub_epi8(lanes, _mm_cmpeq_epi8(block, square));
            lanes = _mm_sub_epi8(lanes, _mm_cmpeq_epi8(block, curly));
        }
        __m128i sums = _mm_sad_epu8(lanes, zero); /* two 64-bit sums of eight lanes each */
        count += _mm_cvtsi128_si32(sums) + _mm_cvtsi128_si32(_mm_unpackhi_epi64(sums, sums));
    }
    int any_high = _mm_movemask_epi8(seen) != 0;
    for (; at < stop; at++) {
        count += *at == '[' || *at == '{';
        any_high |= *at >= 0x80;
    }
    *high = any_high;
    return count;
}
#else
static Py_ssize_t scan_bytes(const unsigned char *at, const unsigned char *stop, int *high) {
    Py_ssize_t count = 0;
    int any_high = 0;
    for (; at < stop; at++) {
        count += *at == '[' || *at == '{';
        any_high |= *at >= 0x80;
    }
    *high = any_high;
    return count;
}
#endif

#endif
