// The rendezvous store Gloo connects its ranks through.
#pragma once

#include <sigma/hal.h>

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>

namespace cpu_vendor {

// The store for one communicator: Gloo's own FileStore for a file:// store
// URI, Gloo's RedisStore for redis://host:port[/prefix], and otherwise the
// host's kv callbacks. Every key is scoped by the bootstrap's key_prefix.
// Every wait lasts `timeout` at most and ends within 100 ms of the host
// cancelling the bootstrap (its callbacks then answer ABORTED): creation
// then fails UNAVAILABLE, as it does through the callbacks.
// Throws std::runtime_error when the store cannot be opened.
std::unique_ptr<gloo::rendezvous::Store> make_gloo_store(const hal_bootstrap_t& bs,
                                                         std::chrono::milliseconds timeout);

}  // namespace cpu_vendor
