// The checkpoint engine's C API over sigma::checkpoint::Engine.
#include <sigma/sigma.h>
#include <sigma/checkpoint.hpp>

#include "capi.hpp"

#include <memory>
#include <string>

using namespace sigma;

struct sigma_checkpoint_s {
  std::unique_ptr<checkpoint::Engine> engine;
  bool async = false;
  std::string extra;  // of the last restore
};

namespace {

constexpr const char* kExtraKey = "sigma.extra";

checkpoint::Options options_of(const sigma_checkpoint_create_args_t& a) {
  if (a.dir == nullptr) throw Error(Code::invalid_argument, "dir is NULL");
  checkpoint::Options o;
  o.dir = a.dir;
  if (a.job) o.job = a.job;
  o.rank = a.rank;
  o.world = a.world ? a.world : 1;
  if (a.keep) o.keep = a.keep;
  o.base_every = a.base_every ? a.base_every : 8;
  if (a.zstd_level) o.zstd_level = a.zstd_level;
  if (a.struct_size >= SIGMA_CHECKPOINT_CREATE_ARGS_V2_SIZE) {
    if (a.compression < 0 || a.compression > 2)
      throw Error(Code::invalid_argument, "compression " + std::to_string(a.compression) +
                                              " is not 0 (automatic), 1 (always) or 2 (never)");
    o.compression = static_cast<checkpoint::Compression>(a.compression);
  }
  return o;
}

}  // namespace

extern "C" {

sigma_status_t sigma_checkpoint_create(const sigma_checkpoint_create_args_t* args, sigma_checkpoint_t** out) {
  return capi::guarded("sigma_checkpoint_create", [&] {
    if (args == nullptr || out == nullptr) throw Error(Code::invalid_argument, "args or out is NULL");
    if (args->struct_size < SIGMA_CHECKPOINT_CREATE_ARGS_V1_SIZE)
      throw Error(Code::invalid_argument, "args struct_size " + std::to_string(args->struct_size) +
                                              " is below the first version's " +
                                              std::to_string(SIGMA_CHECKPOINT_CREATE_ARGS_V1_SIZE));
    auto h = std::make_unique<sigma_checkpoint_s>();
    h->engine = std::make_unique<checkpoint::Engine>(options_of(*args));
    h->async = args->async_save != 0;
    *out = h.release();
  });
}

void sigma_checkpoint_destroy(sigma_checkpoint_t* ck) { delete ck; }

sigma_status_t sigma_checkpoint_save(sigma_checkpoint_t* ck, uint64_t step, const sigma_state_view_t* views,
                                     uint32_t num_views, const char* extra) {
  return capi::guarded("sigma_checkpoint_save", [&] {
    if (ck == nullptr) throw Error(Code::invalid_argument, "engine is NULL");
    checkpoint::Metadata meta;
    meta.step = step;
    if (extra) meta.extra[kExtraKey] = extra;
    const auto v = capi::state_views(views, num_views);
    if (ck->async)
      ck->engine->save_async(v, meta);
    else
      ck->engine->save(v, meta);
  });
}

sigma_status_t sigma_checkpoint_wait(sigma_checkpoint_t* ck) {
  return capi::guarded("sigma_checkpoint_wait", [&] {
    if (ck == nullptr) throw Error(Code::invalid_argument, "engine is NULL");
    ck->engine->wait();
  });
}

sigma_status_t sigma_checkpoint_restore(sigma_checkpoint_t* ck, const sigma_state_view_t* views,
                                        uint32_t num_views, uint64_t newest_step, uint64_t* step) {
  return capi::guarded("sigma_checkpoint_restore", [&] {
    if (ck == nullptr || step == nullptr) throw Error(Code::invalid_argument, "engine or step is NULL");
    checkpoint::Metadata meta;
    const auto r = ck->engine->restore(capi::state_views(views, num_views), &meta, newest_step);
    *step = r.step;
    const auto it = meta.extra.find(kExtraKey);
    ck->extra = it == meta.extra.end() ? "" : it->second;
  });
}

const char* sigma_checkpoint_extra(const sigma_checkpoint_t* ck) { return ck ? ck->extra.c_str() : ""; }

}  // extern "C"
