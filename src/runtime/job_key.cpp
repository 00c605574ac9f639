#include "runtime/job_key.hpp"

#include <sigma/error.hpp>

#include <sodium.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <vector>

namespace sigma::runtime {

namespace {

void init_sodium() {
  static const int rc = sodium_init();  // thread-safe, once
  if (rc < 0) throw Error(Code::internal, "runtime: libsodium failed to initialise");
}

std::string checked(std::string secret, const std::string& where) {
  if (secret.size() < kMinSecretBytes)
    throw Error(Code::invalid_argument, where + ": the job secret has " + std::to_string(secret.size()) +
                                            " bytes, at least " + std::to_string(kMinSecretBytes) +
                                            " are needed");
  if (secret.find('\0') != std::string::npos)
    throw Error(Code::invalid_argument, where + ": the job secret holds a NUL byte");
  return secret;
}

}  // namespace

std::optional<std::string> read_job_secret(const std::string& file, const char* env_value) {
  if (file.empty()) {
    if (env_value == nullptr) return std::nullopt;
    return checked(env_value, "SIGMA_JOB_SECRET");
  }
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0)
    throw Error(Code::invalid_argument, "secret file " + file + ": cannot be read");
  if (!S_ISREG(st.st_mode))
    throw Error(Code::invalid_argument, "secret file " + file + ": not a regular file");
  if ((st.st_mode & 077) != 0) {
    std::ostringstream mode;
    mode << std::oct << (st.st_mode & 0777);
    throw Error(Code::invalid_argument,
                "secret file " + file + ": mode " + mode.str() + " lets others read or write it (chmod 600)");
  }
  if (st.st_size > 4096) throw Error(Code::invalid_argument, "secret file " + file + ": over 4 KiB");
  std::ifstream in(file, std::ios::binary);
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  return checked(std::move(secret), "secret file " + file);
}

JobKey derive_key(std::string_view secret) {
  init_sodium();
  static constexpr char kLabel[] = "sigma job key v1";
  JobKey key{};
  crypto_generichash(key.data(), key.size(), reinterpret_cast<const unsigned char*>(secret.data()),
                     secret.size(), reinterpret_cast<const unsigned char*>(kLabel), sizeof kLabel - 1);
  return key;
}

std::string mac_hex(const JobKey& key, std::string_view message) {
  static_assert(sizeof(JobKey) == crypto_auth_hmacsha256_KEYBYTES);
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256(mac, reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                         key.data());
  char hex[2 * sizeof mac + 1];
  sodium_bin2hex(hex, sizeof hex, mac, sizeof mac);
  return hex;
}

bool mac_ok(const JobKey& key, std::string_view message, std::string_view hex) {
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  size_t len = 0;
  if (hex.size() != 2 * sizeof mac ||
      sodium_hex2bin(mac, sizeof mac, hex.data(), hex.size(), nullptr, &len, nullptr) != 0 ||
      len != sizeof mac)
    return false;
  return crypto_auth_hmacsha256_verify(mac, reinterpret_cast<const unsigned char*>(message.data()),
                                       message.size(), key.data()) == 0;
}

std::string random_hex(size_t bytes) {
  init_sodium();
  std::vector<unsigned char> raw(bytes);
  randombytes_buf(raw.data(), raw.size());
  std::string hex(2 * bytes + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), raw.data(), raw.size());
  hex.pop_back();
  return hex;
}

}  // namespace sigma::runtime
