#include "runtime/agent/follower.hpp"
#include "journal_records.hpp"

#include "runtime/agent/job_exit.hpp"

#include <csignal>

namespace sigma::runtime::agent {

using follow::Note;
using follow::SignalPid;
using follow::StartWorker;
using follow::ToRoot;

follow::Commands Follower::connected(pid_t self) {
  return {ToRoot{protocol::NodeHello{protocol::kVersion, node_, static_cast<int64_t>(self), rack_}},
          Note{journal::encode(journal::NodeEvent{journal::Event::joined_root, node_})}};
}

follow::Commands Follower::message(const protocol::RootMessage& m, double t) {
  follow::Commands out;
  if (const auto* spawn = std::get_if<protocol::Spawn>(&m)) {
    auto [env, refused] = allowed_env(spawn->env);
    if (!refused.empty()) out.push_back(Note{journal::encode(journal::RefusedEnv{spawn->device, refused})});
    out.push_back(StartWorker{spawn->device, std::move(env)});
  } else if (const auto* kill = std::get_if<protocol::Kill>(&m)) {
    for (const auto& [pid, device] : children_)
      if (device == kill->device) out.push_back(SignalPid{pid, kill->signal});
  } else if (const auto* bye = std::get_if<protocol::NodeGoodbye>(&m)) {
    code_ = bye->code;
    ending_since_ = t;
    if (!bye->reason.empty()) out.push_back(Note{journal::encode(journal::Goodbye{code_, bye->reason})});
  }
  return out;
}

follow::Commands Follower::bad_message(const std::string& why, const std::string& text) {
  return {Note{journal::encode(journal::BadMessage{{}, {}, why, text})}};
}

follow::Commands Follower::started(uint32_t device, pid_t pid) {
  children_[pid] = device;
  return {ToRoot{protocol::Launched{device, static_cast<int64_t>(pid)}},
          Note{journal::encode(journal::Launch{device, {}, pid})}};
}

follow::Commands Follower::not_started(uint32_t device, const std::string& why) {
  return {ToRoot{protocol::Exited{device, protocol::ProcessEnd::not_started(why)}}};
}

follow::Commands Follower::exited(pid_t pid, const protocol::ProcessEnd& end) {
  const auto it = children_.find(pid);
  if (it == children_.end()) return {};
  const uint32_t device = it->second;
  children_.erase(it);
  return {ToRoot{protocol::Exited{device, end}},
          Note{journal::encode(journal::ProcessExit{journal::Event::exit, device, end.describe()})}};
}

follow::Commands Follower::root_closed(double t) {
  if (code_ >= 0) return {};  // it said goodbye first
  // Nobody is left to coordinate these workers.
  follow::Commands out{Note{journal::encode(journal::RootLost{})}};
  kill_all(out);
  code_ = job_exit::unrecoverable;
  ending_since_ = t;
  return out;
}

follow::Commands Follower::tick(double t) {
  follow::Commands out;
  if (code_ >= 0 && t - ending_since_ > kGoodbyeGrace_s) kill_all(out);
  return out;
}

void Follower::kill_all(follow::Commands& out) const {
  for (const auto& [pid, device] : children_) out.push_back(SignalPid{pid, SIGKILL});
}

}  // namespace sigma::runtime::agent
