// The planner's C API: a request's YAML in, sigma-plan's JSON out.
#include <sigma/sigma.h>
#include <sigma/planner.hpp>

#include "capi.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace sigma;

extern "C" {

sigma_status_t sigma_plan(const char* request_yaml, const char* name, uint32_t top, char** json) {
  return capi::guarded("sigma_plan", [&] {
    if (request_yaml == nullptr || json == nullptr)
      throw Error(Code::invalid_argument, "request or json is NULL");
    planner::Request q = planner::parse_request(request_yaml, name ? name : "(plan request)");
    if (top) q.top = top;
    const auto t0 = std::chrono::steady_clock::now();
    const auto best = planner::search(q.model, q.devices, q.space, q.framework, q.efficiency, q.top);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string text = planner::plans_json(q, best, s);
    char* out = static_cast<char*>(std::malloc(text.size() + 1));
    if (out == nullptr) throw Error(Code::out_of_memory, "no memory for the plan's text");
    std::memcpy(out, text.c_str(), text.size() + 1);
    *json = out;
  });
}

void sigma_free(void* p) { std::free(p); }

}  // extern "C"
