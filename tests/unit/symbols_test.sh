#!/usr/bin/env bash
# libsigma exports only its API: every defined dynamic symbol is a sigma_*
# C function or lies in a public C++ namespace (sigma::, sigma::hal::,
# sigma::checkpoint::, sigma::parallel::, sigma::planner::, ...), never in an internal one (the agent's state
# machine, the protocol, the C API's helpers) or a third-party library's
# template copy (std::, nlohmann::, YAML::, tbb::, flatbuffers::).
#   symbols_test.sh LIBSIGMA.so
set -euo pipefail
lib=$1
public='^sigma::((hal|checkpoint|guardrails|health|scheduler|bootstrap|kernels|sim|parallel|planner)::|runtime::(Session|SessionOptions|Agent|AgentOptions|AgentEvent|stop_agent_on_signals|run_follower|read_job_secret)|Error|code_name|to_hal_status|from_hal_status|hal_status_name)'
internal='^sigma::(runtime::(agent|protocol|recovery)|sim::detail|capi|checkpoint::(detail|format|codec|io|shard|step))::'
count=0
bad=()
while IFS= read -r line; do
  type=${line%% *}
  name=${line#* }
  case "$type" in A) continue ;; esac  # _edata, _end, __bss_start
  # typeinfo / vtable / thunks name the class they belong to.
  sym=$(sed -E 's/^(typeinfo name for |typeinfo for |vtable for |VTT for |construction vtable for |non-virtual thunk to |virtual thunk to |guard variable for )+//' <<<"$name")
  count=$((count + 1))
  if [[ $sym =~ ^sigma_[a-z0-9_]+$ ]]; then continue; fi
  if [[ $sym =~ $public && ! $sym =~ $internal ]]; then continue; fi
  # Sanitizer instrumentation of the exported objects.
  if [[ $sym =~ ^(__odr_asan|__asan_|__tsan_|__sanitizer_) ]]; then continue; fi
  bad+=("$name")
done < <(nm -D --defined-only "$lib" | awk '{ t=$2; $1=""; $2=""; sub(/^  /, ""); print t " " $0 }' | c++filt | sed -E 's/^([A-Za-z]) /\1 /')
if ((count == 0)); then
  echo "symbols_test: $lib defines no dynamic symbol at all" >&2
  exit 1
fi
if ((${#bad[@]} > 0)); then
  echo "symbols_test: $lib exports ${#bad[@]} of $count symbols outside its API:" >&2
  printf '  %s\n' "${bad[@]:0:40}" >&2
  exit 1
fi
echo "symbols_test: $lib exports $count symbols, all of its API"
