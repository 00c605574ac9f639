// sigma-ckpt: look at, check, compare and convert checkpoints.
//
//   sigma-ckpt ls DIR                    shards below DIR (a job folder, or a root of jobs)
//   sigma-ckpt verify PATH               every hash of a shard, a step (all ranks) or a job
//   sigma-ckpt inspect PATH [--chunks]   one shard: tensors, sizes, ratios, chain, metadata,
//                                        codecs (with --chunks: each chunk's and why)
//   sigma-ckpt diff A B                  which tensors of two shards differ, and by how much
//   sigma-ckpt export PATH --safetensors OUT
//   sigma-ckpt import IN.safetensors --dir DIR [--job NAME] [--step N]
//
// Exit status: 0 fine; 1 damage found (verify) or differences (diff); 2 usage
// or an unreadable input.
#include <sigma/checkpoint.hpp>

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

namespace ck = sigma::checkpoint;
namespace fs = std::filesystem;

namespace {

std::string dtype_name(hal_dtype_t d) { return sigma::hal::dtype_name(d); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? "," : "") + std::to_string(s[i]);
  return o + "]";
}

std::string human(double bytes) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024 && i < 4) bytes /= 1024, ++i;
  char b[32];
  std::snprintf(b, sizeof b, "%.1f %s", bytes, u[i]);
  return b;
}

std::vector<fs::path> jobs_below(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& j : ck::list_jobs(dir.string())) out.emplace_back(j);
  return out;
}

// Every shard a PATH names: a shard, a step folder (its ranks) or a job.
std::vector<std::string> shards_of(const fs::path& p) {
  switch (ck::classify(p.string())) {
    case ck::PathKind::shard:
      return {p.string()};
    case ck::PathKind::step:
      return ck::list_step_shards(p.string());
    default: {
      std::vector<std::string> out;
      for (const auto& j : jobs_below(p))
        for (const auto& s : ck::list_shards(j.string())) out.push_back(s.path);
      std::sort(out.begin(), out.end());
      return out;
    }
  }
}

// The step folders a PATH names: itself, or those of the jobs below it.
std::vector<fs::path> steps_of(const fs::path& p) {
  switch (ck::classify(p.string())) {
    case ck::PathKind::shard:
      return {};
    case ck::PathKind::step:
      return {p};
    default: {
      std::vector<fs::path> out;
      for (const auto& j : jobs_below(p))
        for (const auto& s : ck::list_steps(j.string())) out.push_back(s.path);
      return out;
    }
  }
}

int cmd_ls(const std::string& dir) {
  std::printf("%-20s %6s %5s %-12s %12s %12s %6s %8s  %s\n", "job", "step", "rank", "kind", "raw", "stored",
              "ratio", "tensors", "step state");
  for (const auto& job : jobs_below(dir)) {
    std::map<uint64_t, std::string> state;
    for (const auto& st : ck::list_steps(job.string()))
      state[st.step] =
          st.complete ? "complete, world " + std::to_string(st.world) : "INCOMPLETE: " + st.problem;
    for (const auto& s : ck::list_shards(job.string())) {
      std::string kind = s.base_step == -1   ? "base"
                         : s.base_step == -2 ? "UNREADABLE"
                                             : "delta of " + std::to_string(s.base_step);
      std::printf("%-20s %6llu %5u %-12s %12s %12s %6.3f %8zu  %s\n", job.filename().c_str(),
                  static_cast<unsigned long long>(s.step), s.rank, kind.c_str(),
                  human(static_cast<double>(s.raw_bytes)).c_str(),
                  human(static_cast<double>(s.stored_bytes)).c_str(),
                  s.raw_bytes ? static_cast<double>(s.stored_bytes) / static_cast<double>(s.raw_bytes) : 0.0,
                  s.tensors.size(), state[s.step].c_str());
    }
  }
  return 0;
}

int cmd_verify(const std::string& path) {
  int bad = 0, n = 0;
  for (const auto& s : shards_of(path)) {
    ++n;
    try {
      ck::verify(s);
      std::printf("ok       %s\n", s.c_str());
    } catch (const sigma::Error& e) {
      ++bad;
      std::printf("DAMAGED  %s\n         %s\n", s.c_str(), e.what());
    }
  }
  if (n == 0) {
    std::fprintf(stderr, "sigma-ckpt: no checkpoint under %s\n", path.c_str());
    return 2;
  }
  // Each step's global manifest against its shards. A step without one is
  // incomplete (a save in progress or interrupted), which is not damage; a
  // manifest that is there in any form (a dangling link, a folder) and
  // does not verify is damage.
  int incomplete = 0, steps_bad = 0, steps_ok = 0;
  for (const auto& st : steps_of(path)) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(st / "global.sgcs", ec))) {
      ++incomplete;
      std::printf("incomplete %s (no global manifest)\n", st.c_str());
      continue;
    }
    try {
      ck::verify_step(st.string(), /*shards_too=*/false);  // their data was verified above
      ++steps_ok;
      std::printf("ok       %s/global.sgcs\n", st.c_str());
    } catch (const sigma::Error& e) {
      ++steps_bad;
      std::printf("DAMAGED  %s/global.sgcs\n         %s\n", st.c_str(), e.what());
    }
  }
  std::printf("%d of %d shards verified, %d damaged\n", n - bad, n, bad);
  std::printf("%d step(s) tied together by their global manifest, %d damaged, %d incomplete\n", steps_ok,
              steps_bad, incomplete);
  return bad || steps_bad ? 1 : 0;
}

std::string layout_str(const ck::ShardInfo::Tensor& t) {
  switch (t.layout) {
    case ck::Layout::replicated:
      return "replicated";
    case ck::Layout::split:
      return "split dim " + std::to_string(t.split_dim) + " at " + std::to_string(t.split_offset) + " of " +
             shape_str(t.global_shape);
    default:
      return "local";
  }
}

std::string compression_str(const ck::ShardInfo& s) {
  if (s.threads == 0) return "zstd, every chunk (format 1)";
  if (s.compression == ck::Compression::always) return "zstd, every chunk (forced)";
  if (s.compression == ck::Compression::never) return "raw, every chunk (forced)";
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "automatic: per chunk, against the device's %.0f MB/s read and %.0f MB/s write, %u threads",
                s.disk_read_bytes_per_s * 1e-6, s.disk_write_bytes_per_s * 1e-6, s.threads);
  return buf;
}

void print_chunks(const ck::ShardInfo::Tensor& t) {
  for (const auto& c : t.chunk_list)
    std::printf("    at %-12llu %10s -> %10s  %-9s %s\n", static_cast<unsigned long long>(c.offset),
                human(static_cast<double>(c.raw_size)).c_str(),
                human(static_cast<double>(c.stored_size)).c_str(), c.codec.c_str(), c.why.c_str());
}

int cmd_inspect(const std::string& path, bool chunks) {
  const ck::ShardInfo s = ck::inspect(path);
  std::printf("shard   %s\nstep    %llu (rank %u of %u)\nkind    %s\nformat  %u\ncodecs  %s\n",
              s.path.c_str(), static_cast<unsigned long long>(s.step), s.rank, s.world,
              s.base_step < 0 ? "base" : ("delta of step " + std::to_string(s.base_step)).c_str(),
              s.format_version, compression_str(s).c_str());
  std::printf("size    %s raw, %s stored (%.3f)\n", human(static_cast<double>(s.raw_bytes)).c_str(),
              human(static_cast<double>(s.stored_bytes)).c_str(),
              s.raw_bytes ? static_cast<double>(s.stored_bytes) / static_cast<double>(s.raw_bytes) : 0.0);
  std::printf(
      "meta    data position %llu, loss scale %g, %zu RNG bytes, guardrails state %zu bytes, plan %s\n",
      static_cast<unsigned long long>(s.meta.data_position), s.meta.loss_scale, s.meta.rng_state.size(),
      s.meta.guardrails_state.size(), s.meta.parallel_plan.empty() ? "-" : s.meta.parallel_plan.c_str());
  for (const auto& [k, v] : s.meta.extra) std::printf("        %s = %s\n", k.c_str(), v.c_str());
  std::printf("\n%-40s %-5s %-18s %12s %12s %6s %7s %5s %5s %9s  %s\n", "tensor", "dtype", "shape", "raw",
              "stored", "ratio", "chunks", "zstd", "raw", "unchanged", "layout");
  for (const auto& t : s.tensors) {
    std::printf(
        "%-40s %-5s %-18s %12s %12s %6.3f %7llu %5llu %5llu %9llu  %s\n", t.name.c_str(),
        dtype_name(t.dtype).c_str(), shape_str(t.shape).c_str(), human(static_cast<double>(t.bytes)).c_str(),
        human(static_cast<double>(t.stored_bytes)).c_str(),
        t.bytes ? static_cast<double>(t.stored_bytes) / static_cast<double>(t.bytes) : 0.0,
        static_cast<unsigned long long>(t.chunks), static_cast<unsigned long long>(t.chunks_compressed),
        static_cast<unsigned long long>(t.chunks_raw), static_cast<unsigned long long>(t.chunks_unchanged),
        layout_str(t).c_str());
    if (chunks) print_chunks(t);
  }
  return 0;
}

int cmd_diff(const std::string& a, const std::string& b) {
  const ck::ShardInfo ia = ck::inspect(a), ib = ck::inspect(b);
  int differ = 0;
  std::printf("%-40s %-10s %12s %14s %14s\n", "tensor", "status", "elements", "max |a-b|", "rms(a-b)");
  for (const auto& ta : ia.tensors) {
    const ck::ShardInfo::Tensor* tb = nullptr;
    for (const auto& x : ib.tensors)
      if (x.name == ta.name) tb = &x;
    if (tb == nullptr) {
      std::printf("%-40s %-10s\n", ta.name.c_str(), "only in A");
      ++differ;
      continue;
    }
    if (tb->dtype != ta.dtype || tb->shape != ta.shape) {
      std::printf("%-40s %-10s %s%s vs %s%s\n", ta.name.c_str(), "reshaped", dtype_name(ta.dtype).c_str(),
                  shape_str(ta.shape).c_str(), dtype_name(tb->dtype).c_str(), shape_str(tb->shape).c_str());
      ++differ;
      continue;
    }
    const ck::TensorDiff d = ck::diff_tensor(a, b, ta.name);  // chunk by chunk, side by side
    if (d.changed) ++differ;
    std::printf("%-40s %-10s %12llu %14.6g %14.6g\n", ta.name.c_str(), d.changed ? "differs" : "same",
                static_cast<unsigned long long>(d.changed), d.max_abs, d.rms);
  }
  for (const auto& tb : ib.tensors) {
    bool in_a = false;
    for (const auto& x : ia.tensors) in_a |= x.name == tb.name;
    if (!in_a) std::printf("%-40s %-10s\n", tb.name.c_str(), "only in B"), ++differ;
  }
  std::printf("%d tensor(s) differ\n", differ);
  return differ ? 1 : 0;
}

int cmd_import(const std::string& in, const std::string& dir, const std::string& job, uint64_t step) {
  std::map<std::string, std::string> meta_in;
  auto tensors = ck::import_safetensors(in, &meta_in);
  ck::Options o;
  o.dir = dir;
  o.job = job;
  o.base_every = 1;
  ck::Engine e(o);
  std::vector<ck::TensorView> views;
  for (auto& t : tensors) views.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
  ck::Metadata m;
  m.step = step;
  m.extra = meta_in;
  const ck::SaveResult r = e.save(views, m);
  std::printf("imported %zu tensors (%s) from %s into %s\n", tensors.size(),
              human(static_cast<double>(r.raw_bytes)).c_str(), in.c_str(), r.path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Looks at, checks, compares and converts libsigma checkpoints"};
  app.require_subcommand(1);
  std::string a, b, out, dir, job = "imported";
  uint64_t step = 0;
  auto* ls = app.add_subcommand("ls", "list the shards below a job folder or a root of jobs");
  ls->add_option("DIR", a)->required()->check(CLI::ExistingDirectory);
  auto* verify = app.add_subcommand("verify", "check every hash; exit 1 on damage");
  verify->add_option("PATH", a, "a shard, a step folder or a job folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto* inspect = app.add_subcommand("inspect", "tensors, sizes, ratios, chain and metadata of a shard");
  inspect->add_option("PATH", a)->required()->check(CLI::ExistingDirectory);
  bool chunks = false;
  inspect->add_flag("--chunks", chunks, "every chunk: its codec and why the writer chose it");
  auto* diff =
      app.add_subcommand("diff", "which tensors of two shards differ, and by how much; exit 1 if any");
  diff->add_option("A", a)->required()->check(CLI::ExistingDirectory);
  diff->add_option("B", b)->required()->check(CLI::ExistingDirectory);
  auto* exp = app.add_subcommand("export", "write a shard's tensors as safetensors");
  exp->add_option("PATH", a)->required()->check(CLI::ExistingDirectory);
  exp->add_option("--safetensors", out, "the file to write")->required();
  auto* imp = app.add_subcommand("import", "save a safetensors file as a base checkpoint");
  imp->add_option("FILE", a)->required()->check(CLI::ExistingFile);
  imp->add_option("--dir", dir, "the checkpoint root")->required();
  imp->add_option("--job", job, "the job folder's name");
  imp->add_option("--step", step, "the step to record");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // usage: the documented 2, not the parser's own codes
  }
  try {
    if (*ls) return cmd_ls(a);
    if (*verify) return cmd_verify(a);
    if (*inspect) return cmd_inspect(a, chunks);
    if (*diff) return cmd_diff(a, b);
    if (*exp) {
      ck::export_safetensors(a, out);
      std::printf("wrote %s\n", out.c_str());
      return 0;
    }
    if (*imp) return cmd_import(a, dir, job, step);
  } catch (const sigma::Error& e) {
    std::fprintf(stderr, "sigma-ckpt: %s\n", e.what());
    return e.code() == sigma::Code::data_loss && *verify ? 1 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sigma-ckpt: %s\n", e.what());
    return 2;
  }
  return 2;
}
