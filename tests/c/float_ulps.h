/* Distance in representable floats between two floats, for the C tests: the bit patterns
 * mapped to a monotone key (-0 and +0 adjacent), 0 for two NaNs, INT64_MAX for one. */
#ifndef IPU_TEST_FLOAT_ULPS_H
#define IPU_TEST_FLOAT_ULPS_H

#include <stdint.h>
#include <string.h>

static inline int64_t ulps_key(float f) {
    int32_t i;
    memcpy(&i, &f, 4);
    return i < 0 ? -(int64_t)(i & 0x7fffffff) - 1 : (int64_t)i;
}

static inline int64_t ulps(float a, float b) {
    if (a != a || b != b) return (a != a) == (b != b) ? 0 : INT64_MAX;
    if (a == b) return 0;
    int64_t d = ulps_key(a) - ulps_key(b);
    return d < 0 ? -d : d;
}

#endif
