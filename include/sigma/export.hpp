// sigma/export.hpp -- marks libsigma's exported C++ API.
//
// libsigma is built with hidden visibility: only declarations marked
// SIGMA_EXPORT (the public C++ API of include/sigma/ and the sigma_* C
// functions, which sigma.h marks the same way) are in its dynamic symbol
// table, so what a program can link to is exactly what is documented.
#pragma once

#ifndef SIGMA_EXPORT
#if defined(__GNUC__) || defined(__clang__)
#define SIGMA_EXPORT __attribute__((visibility("default")))
#else
#define SIGMA_EXPORT
#endif
#endif
