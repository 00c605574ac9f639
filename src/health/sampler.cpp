// The telemetry sampler: one thread reading every listed field of its
// devices through the HAL at a fixed rate and handing the samples to a
// Monitor. A device that cannot be read (lost) still gets its samples, whose
// statuses say so; the monitor decides what that means.
#include <sigma/health.hpp>

#include <chrono>
#include <ctime>

namespace sigma::health {

double monotonic_s() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

Sampler::Sampler(const hal::Plugin& plugin, std::vector<uint32_t> devices, Monitor& monitor, double rate_hz)
    : plugin_(plugin), devices_(std::move(devices)), monitor_(monitor), rate_hz_(rate_hz) {
  if (!(rate_hz_ > 0) || rate_hz_ > 1000) {
    throw Error(Code::invalid_argument, "health sampler: rate_hz must be in (0, 1000]");
  }
  for (uint32_t dev : devices_) {
    std::vector<hal_field_id_t> ids;
    for (const hal_field_info_t& f : plugin_.telemetry_fields(dev)) ids.push_back(f.id);
    fields_.push_back(std::move(ids));
    monitor_.add_device(dev);
  }
}

Sampler::~Sampler() { stop(); }

void Sampler::start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { loop(); });
}

void Sampler::stop() {
  {
    std::lock_guard<std::mutex> lk(wake_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Sampler::loop() {
  const auto period = std::chrono::duration<double>(1.0 / rate_hz_);
  auto next = std::chrono::steady_clock::now();
  while (!stop_) {
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (fields_[i].empty()) continue;
      std::vector<hal_telemetry_sample_t> samples;
      try {
        samples = plugin_.read_telemetry(devices_[i], fields_[i]);
      } catch (const Error& e) {
        // The read itself failed (bad arguments or a lost device): the
        // monitor hears of it as an error on the device.
        monitor_.observe_error(devices_[i], e.code(), e.what(), monotonic_s());
        continue;
      }
      monitor_.observe_telemetry(devices_[i], monotonic_s(), samples.data(), samples.size());
    }
    rounds_.fetch_add(1);
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(period);
    std::unique_lock<std::mutex> lk(wake_mu_);
    wake_.wait_until(lk, next, [this] { return stop_.load(); });
  }
}

}  // namespace sigma::health
