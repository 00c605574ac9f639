// safetensors export and import, and reading single tensors for tools.
#include <sigma/checkpoint.hpp>

#include "format.hpp"
#include "io.hpp"
#include "shard.hpp"

#include "regular_file.hpp"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

namespace sigma::checkpoint {
namespace {

using nlohmann::json;

const char* st_dtype(hal_dtype_t d) {
  switch (d) {
    case HAL_DTYPE_F32:
      return "F32";
    case HAL_DTYPE_F16:
      return "F16";
    case HAL_DTYPE_BF16:
      return "BF16";
    case HAL_DTYPE_F64:
      return "F64";
    case HAL_DTYPE_I32:
      return "I32";
    case HAL_DTYPE_I64:
      return "I64";
    case HAL_DTYPE_U8:
      return "U8";
    default:
      return nullptr;
  }
}

bool hal_of(const std::string& s, hal_dtype_t& out) {
  static const std::pair<const char*, hal_dtype_t> names[] = {
      {"F32", HAL_DTYPE_F32}, {"F16", HAL_DTYPE_F16}, {"BF16", HAL_DTYPE_BF16}, {"F64", HAL_DTYPE_F64},
      {"I32", HAL_DTYPE_I32}, {"I64", HAL_DTYPE_I64}, {"U8", HAL_DTYPE_U8}};
  for (const auto& [n, d] : names)
    if (s == n) return out = d, true;
  return false;
}

}  // namespace

std::vector<uint8_t> read_tensor(const std::string& shard_path, const std::string& name) {
  const shard::Shard s = shard::open(shard_path);
  const std::unique_ptr<shard::Shard> base = shard::open_base(s);
  for (const auto& t : s.manifest.tensors) {
    if (t.name != name) continue;
    std::vector<uint8_t> out(t.bytes);
    shard::read_tensor(s, t, base.get(), out.data());
    return out;
  }
  throw Error(Code::invalid_argument, "checkpoint: " + shard_path + " has no tensor '" + name + "'");
}

void export_safetensors(const std::string& shard_path, const std::string& out_path) {
  const shard::Shard s = shard::open(shard_path);
  const std::unique_ptr<shard::Shard> base = shard::open_base(s);
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& t : s.manifest.tensors) {
    header[t.name] = {
        {"dtype", st_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  json meta = json::object();
  const Metadata& m = s.manifest.meta;
  meta["sigma.step"] = std::to_string(m.step);
  meta["sigma.data_position"] = std::to_string(m.data_position);
  meta["sigma.loss_scale"] = std::to_string(m.loss_scale);
  if (!m.parallel_plan.empty()) meta["sigma.parallel_plan"] = m.parallel_plan;
  for (const auto& [k, v] : m.extra) meta[k] = v;
  header["__metadata__"] = meta;
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');  // the format pads the header with spaces to 8 bytes
  // Written beside the destination and renamed over it: a destination that
  // is not a regular file (a device such as /dev/null, a FIFO, a folder)
  // would be replaced by the rename, so it is refused by kind instead.
  struct stat st {};
  if (::lstat(out_path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw Error(Code::invalid_argument, "safetensors: " + out_path + " is not a regular file (" +
                                            files::kind_of_mode(st.st_mode) +
                                            "): refused (the write would replace it)");
  const std::string tmp = out_path + ".tmp";
  try {
    io::Writer w(tmp);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
    w.write(len, 8);
    w.write(h.data(), h.size());
    // Chunk by chunk, in order: memory stays a chunk whatever the tensors.
    for (const auto& t : s.manifest.tensors)
      shard::stream_tensor(s, t, base.get(),
                           [&](uint64_t, const uint8_t* bytes, uint64_t n) { w.write(bytes, n); });
    w.sync_and_close();
    io::rename(tmp, out_path);
  } catch (...) {
    io::remove_tree(tmp);
    throw;
  }
}

std::vector<OwnedTensor> parse_safetensors(const uint8_t* data, uint64_t size, const std::string& name,
                                           std::map<std::string, std::string>* metadata) {
  auto bad = [&](const std::string& why) -> Error {
    return Error(Code::invalid_argument, "safetensors: " + name + ": " + why);
  };
  if (size < 8) throw bad("shorter than its 8-byte header length");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= static_cast<uint64_t>(data[i]) << (8 * i);
  if (hlen > (uint64_t{100} << 20) || hlen > size - 8)
    throw bad("header length " + std::to_string(hlen) + " exceeds the file or the 100 MiB bound");
  json header;
  try {
    header = json::parse(data + 8, data + 8 + hlen, nullptr, true, false);
  } catch (const json::exception& e) {
    throw bad(std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) throw bad("header is not a JSON object");
  const uint64_t body = size - 8 - hlen;
  std::vector<OwnedTensor> out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw bad("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) throw bad("__metadata__." + m.key() + " is not a string");
        if (metadata) (*metadata)[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + it.key().substr(0, 200) + "'";
    if (it.key().empty()) throw bad("a tensor has an empty name");
    const json& t = *it;
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      throw bad(where + ": needs dtype, shape and data_offsets");
    OwnedTensor x;
    x.name = it.key();
    if (!t["dtype"].is_string() || !hal_of(t["dtype"].get<std::string>(), x.dtype))
      throw bad(where + ": dtype " + t["dtype"].dump().substr(0, 40) +
                " is not one of F32 F16 BF16 F64 I32 I64 U8");
    if (!t["shape"].is_array() || t["shape"].size() > 64)
      throw bad(where + ": shape is not a list of <= 64 sizes");
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned()) throw bad(where + ": shape holds " + d.dump().substr(0, 40));
      x.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(d.get<uint64_t>(), uint64_t{1} << 62)));
    }
    const auto& off = t["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw bad(where + ": data_offsets is not [begin, end]");
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > body)
      throw bad(where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + ") outside the " +
                std::to_string(body) + " bytes of data");
    uint64_t want;
    try {
      want = format::tensor_bytes(x.dtype, x.shape, where, Code::invalid_argument);
    } catch (const Error& err) {
      throw bad(err.what());
    }
    if (want != e - b)
      throw bad(where + ": its shape needs " + std::to_string(want) + " bytes, its range has " +
                std::to_string(e - b));
    ranges.emplace_back(b, e);
    x.bytes.assign(data + 8 + hlen + b, data + 8 + hlen + e);
    out.push_back(std::move(x));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second && ranges[i].first != ranges[i].second)
      throw bad("two tensors overlap");
  return out;
}

std::vector<OwnedTensor> import_safetensors(const std::string& path,
                                            std::map<std::string, std::string>* metadata) {
  std::vector<uint8_t> bytes;
  try {
    bytes = io::read_file(path, uint64_t{1} << 40);
  } catch (const Error& e) {
    throw Error(Code::invalid_argument, std::string("safetensors: ") + e.what());
  }
  return parse_safetensors(bytes.data(), bytes.size(), path, metadata);
}

}  // namespace sigma::checkpoint
