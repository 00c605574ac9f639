/* CHECK for the C test programs: a failed condition is printed with its
 * place and counted in `failures`; main returns non-zero when any failed. */
#ifndef SIGMA_TESTS_C_CHECK_H_
#define SIGMA_TESTS_C_CHECK_H_

#include <stdio.h>

static int failures;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                              \
    }                                                                          \
  } while (0)

#endif /* SIGMA_TESTS_C_CHECK_H_ */
