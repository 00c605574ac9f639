// The job's secret and what is done with it: agents on several hosts (and
// the workers that reach the root over TCP) authenticate every message with
// an HMAC-SHA-256 under a key derived from one per-job secret, so whoever
// can write the rendezvous store or reach a port cannot pose as the root
// or as an agent. libsodium does the cryptography.
#pragma once

#include <sigma/agent.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sigma::runtime {

using JobKey = std::array<uint8_t, 32>;

// read_job_secret() (the secret from a file or SIGMA_JOB_SECRET) is public:
// sigma/agent.hpp.

// The key of a secret (BLAKE2b, domain-separated). Pure.
JobKey derive_key(std::string_view secret);

// HMAC-SHA-256 of `message` under `key`, as 64 hex digits; and its
// constant-time check.
std::string mac_hex(const JobKey& key, std::string_view message);
bool mac_ok(const JobKey& key, std::string_view message, std::string_view hex);

// `bytes` random bytes as hex (a connection's nonce).
std::string random_hex(size_t bytes);

}  // namespace sigma::runtime
