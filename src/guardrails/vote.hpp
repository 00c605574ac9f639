// The fingerprint votes' rules: which value the ranks agree on.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace sigma::guardrails::detail {

// The value more than half of `values` hold; nullopt when none does (a tie,
// or all different). Pure.
std::optional<uint64_t> strict_majority(const std::vector<uint64_t>& values);

// The strict majority's value, or else the value of the one largest group
// of two or more equal values (two ranks that computed the same bytes; a
// corruption does not give two independent hashes alike). nullopt when the
// largest group is shared by two values or is a single rank. Pure.
std::optional<uint64_t> agreed_value(const std::vector<uint64_t>& values);

}  // namespace sigma::guardrails::detail
