// The planner's C API: a request's YAML in, sigma-plan's JSON out.
#include <sigma/sigma.h>
#include <sigma/planner.hpp>

#include "capi.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

using namespace sigma;

extern "C" {

sigma_status_t sigma_plan(const char* request_yaml, const char* name, uint32_t top, char** json) {
  return capi::guarded("sigma_plan", [&] {
    if (request_yaml == nullptr || json == nullptr)
      throw Error(Code::invalid_argument, "request or json is NULL");
    const std::string text = planner::plan_json(request_yaml, name ? name : "(plan request)", top);
    char* out = static_cast<char*>(std::malloc(text.size() + 1));
    if (out == nullptr) throw Error(Code::out_of_memory, "no memory for the plan's text");
    std::memcpy(out, text.c_str(), text.size() + 1);
    *json = out;
  });
}

void sigma_free(void* p) { std::free(p); }

}  // extern "C"
