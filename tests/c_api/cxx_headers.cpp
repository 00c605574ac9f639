// The HAL header included from C++ (-pedantic -Werror), together with every
// public C++ header, must compile; the layout guards inside it must hold.
#include <sigma/hal.h>
#include <sigma/sigma.h>
#include <sigma/bootstrap.hpp>
#include <sigma/error.hpp>
#include <sigma/hal.hpp>

#include <cstdio>
#include <type_traits>

static_assert(std::is_standard_layout_v<hal_api_t>);
static_assert(std::is_trivially_copyable_v<hal_coll_args_t>);
static_assert(offsetof(hal_api_t, struct_size) == 0);

int main() {
  std::printf("hal.h compiles as C++; hal_api_t is %zu bytes\n", sizeof(hal_api_t));
  return sizeof(hal_api_t) == HAL_API_V1_0_SIZE ? 0 : 1;
}
