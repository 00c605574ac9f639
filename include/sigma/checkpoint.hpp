// sigma/checkpoint.hpp -- the checkpoint engine.
//
// A checkpoint is named tensors (any ABI dtype and shape) plus small typed
// metadata, one shard per rank. On disk: a data file of zstd frames, one per
// chunk, and a FlatBuffers manifest (src/checkpoint/checkpoint.fbs) written
// last. A shard is committed by renaming its finished temporary folder into
// place and syncing the folders, so a half-written checkpoint is never seen
// as complete. Every K-th checkpoint is a full base (chunks byte-plane
// shuffled + zstd); the ones between are differential against that base:
// a chunk whose xxh3 did not change is not written at all, the others store
// shuffle(chunk ^ base chunk) + zstd. Loading verifies the manifest with the
// FlatBuffers verifier, bounds every size before allocating, checks every
// hash, and falls back to the newest good checkpoint, saying why.
//
// Saving can be asynchronous: save_async() blocks the caller only for the
// copy of the tensors into host staging memory; a background writer
// compresses (on oneTBB) and persists. When it falls behind, the next
// save_async() waits for it (back-pressure) and reports the wait, instead
// of piling up memory.
//
// Thread-safety: an Engine is used by one thread at a time (the training
// loop's); its writer thread is its own business.
#pragma once

#include <sigma/export.hpp>

#include <sigma/hal.h>
#include <sigma/error.hpp>
#include <sigma/hal.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sigma::checkpoint {

// How a tensor of one rank relates to the other ranks' tensors; what lets a
// checkpoint saved on N ranks be restored on M.
enum class Layout : uint8_t {
  local = 0,       // this rank's own: restored on the same world size only
  replicated = 1,  // the same on every rank (data-parallel weights)
  split = 2,       // a slice along split_dim of a tensor of global_shape
};

// What a tensor is, wherever it is described: a view of the state, a
// shard's record of it, what `ls`/`inspect` show. One definition.
struct TensorSpec {
  std::string name;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  std::vector<int64_t> shape;
  // Layout::split: this tensor is [split_offset, split_offset +
  // shape[split_dim]) along split_dim of a tensor of global_shape (every
  // other dimension equal). Layout::replicated: global_shape is the shape.
  Layout layout = Layout::local;
  int32_t split_dim = 0;
  int64_t split_offset = 0;
  std::vector<int64_t> global_shape;
};

// One tensor of the state, borrowed for the call. Host memory, or memory of
// `device` of `plugin` (copied through the HAL when that memory is not
// host-addressable).
struct SIGMA_EXPORT TensorView : TensorSpec {
  TensorView() = default;
  TensorView(std::string name_, hal_dtype_t dtype_, std::vector<int64_t> shape_, void* data_,
             hal::Plugin* plugin_ = nullptr, uint32_t device_ = 0)
      : data(data_), plugin(plugin_), device(device_) {
    name = std::move(name_);
    dtype = dtype_;
    shape = std::move(shape_);
  }

  void* data = nullptr;
  hal::Plugin* plugin = nullptr;
  uint32_t device = 0;

  uint64_t bytes() const;  // product of the shape times the dtype's size
};

// Views with a layout, for brevity.
SIGMA_EXPORT TensorView replicated(TensorView v);
SIGMA_EXPORT TensorView split(TensorView v, int32_t dim, int64_t offset, std::vector<int64_t> global_shape);

struct Metadata {
  uint64_t step = 0;
  uint64_t data_position = 0;      // where the data loader resumes
  std::vector<uint8_t> rng_state;  // opaque
  double loss_scale = 1;
  std::string guardrails_state;  // guardrails::Guardrails::save_state()
  std::string parallel_plan;     // opaque (JSON by convention)
  std::map<std::string, std::string> extra;
};

// Whether a chunk is stored zstd-compressed or as it is. `automatic`
// samples each chunk and compresses it only where that makes neither its
// save nor its restore slower, given the codec's measured rate and ratio
// and the device's read and write rates (docs/checkpoint.md has the model).
enum class Compression : uint8_t {
  automatic = 0,
  always = 1,  // every chunk (format 1's only way)
  never = 2,   // none (unchanged chunks of a delta still store nothing)
};

struct SIGMA_EXPORT Options {
  std::string dir;  // the checkpoint root; the job's folder goes below it
  std::string job = "job";
  uint32_t rank = 0, world = 1;
  uint64_t chunk_bytes = uint64_t{4} << 20;
  uint32_t base_every = 8;  // a full base every K checkpoints (1: always)
  int zstd_level = 1;       // see docs/checkpoint.md for the measured trade-off
  Compression compression = Compression::automatic;
  // The device's rates, bytes/s, that the automatic choice weighs the codec
  // against: cold reads, and writes made durable. 0: measured once per
  // process per device (64 MiB written and read back in the job folder).
  double disk_read_bytes_per_s = 0, disk_write_bytes_per_s = 0;
  uint32_t keep = 3;  // newest checkpoints kept (their bases are kept too)
  // Async staging bound; 0: room for two snapshots of the state.
  uint64_t max_pending_bytes = 0;
  // Data files are written with O_DIRECT where the file system takes it
  // (buffered otherwise, with streaming writeback); false: always buffered.
  bool direct_io = true;
  // Told about back-pressure waits and fallbacks ("checkpoint: ...").
  std::function<void(const std::string&)> log;
};

struct SaveResult {
  uint64_t step = 0;
  std::string path;  // the shard's folder
  bool base = false;
  uint64_t raw_bytes = 0;     // the state's bytes
  uint64_t stored_bytes = 0;  // what the data file holds
  uint64_t chunks = 0, chunks_unchanged = 0;
  double blocked_s = 0;       // how long the caller was held (copy + back-pressure)
  double backpressure_s = 0;  // of which, waiting for the writer
  double persist_s = 0;       // compress + write + fsync + commit
  // This save completed its step (every rank's shard present): the step's
  // global manifest was written (by this rank or, racing, by another).
  bool step_complete = false;
  // What the caller should know of this save ("" mostly): e.g. that the
  // device's rates could not be measured, so every chunk was stored raw.
  std::string note;
};

struct RestoreResult {
  uint64_t step = 0;
  std::string path;          // this rank's shard, or the step folder when re-sharded
  uint32_t saved_world = 0;  // the world size the checkpoint was saved with
  bool resharded = false;    // read from other ranks' shards (another world size)
  // Newer checkpoints that were refused, each with the file, chunk and check.
  std::vector<std::string> refused;
};

// What `ls` / `inspect` show of one shard.
struct ShardInfo {
  std::string path;
  uint64_t step = 0;
  uint32_t rank = 0, world = 1;
  uint32_t format_version = 0;
  int64_t base_step = -1;  // -1: a base
  uint64_t raw_bytes = 0, stored_bytes = 0;
  // How the writer chose the codecs: the mode, the device's rates (bytes/s)
  // and the threads it weighed the codec against (0 in format 1 shards).
  Compression compression = Compression::always;
  double disk_read_bytes_per_s = 0, disk_write_bytes_per_s = 0;
  uint32_t threads = 0;
  struct Chunk {
    uint64_t offset = 0, raw_size = 0, stored_size = 0;
    std::string codec;  // "zstd", "xor+zstd", "unchanged", "raw"
    std::string why;    // the choice and its figures ("" where no choice was made)
  };
  struct Tensor : TensorSpec {
    uint64_t bytes = 0, stored_bytes = 0, chunks = 0, chunks_unchanged = 0;
    uint64_t chunks_raw = 0, chunks_compressed = 0;
    std::vector<Chunk> chunk_list;  // in order
  };
  std::vector<Tensor> tensors;
  Metadata meta;
};

class SIGMA_EXPORT Engine {
 public:
  // Creates the job folder; removes this rank's leftovers of crashed saves.
  // Throws Error(invalid_argument) for bad options, Error(unavailable) when
  // the folder cannot be made.
  explicit Engine(Options options);
  // Waits for pending saves (errors are logged, not thrown, here).
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Durable when it returns. Throws Error(unavailable) naming the file and
  // the OS error (a full disk, ...): nothing half-written stays, older
  // checkpoints and the tensors are untouched.
  SaveResult save(const std::vector<TensorView>& tensors, const Metadata& meta);
  // When save_async() copies the tensors.
  enum class Snapshot {
    now,         // before it returns: the caller may change the tensors at once
    overlapped,  // on a thread of the engine's, while the caller goes on: the
                 // tensors must not change until wait_snapshot() returns
  };
  // Copies the tensors, then returns; a background writer persists them.
  // A failure of that writer is thrown by the next save_async() or wait().
  //
  // Snapshot::overlapped is CheckFreq's split: call it at a step boundary,
  // run the next forward and backward pass (which only read the weights and
  // optimiser state), and call wait_snapshot() before the optimiser step
  // changes them; the copy is hidden behind the pass. Device-memory views
  // are still copied before it returns. Every other call of the engine
  // waits for the copy first.
  SaveResult save_async(const std::vector<TensorView>& tensors, const Metadata& meta,
                        Snapshot mode = Snapshot::now);
  // Makes two host copies of tensors like these ready for save_async() (one
  // becomes the differential base, one stages the next save), every page
  // touched, on the writer's thread: a copy into fresh memory costs a page
  // fault per page, several times the copy itself. Returns at once; a save
  // that comes first stages into fresh memory as before, and memory that
  // cannot be had is only logged. Any thread, like save_async().
  void reserve(const std::vector<TensorView>& tensors);
  // Until the copy of an overlapped save_async() is done (at once when none
  // is running); returns the seconds it waited: with the time save_async()
  // took, what the save cost the training loop.
  double wait_snapshot();
  // Until every pending save is durable; throws the first failure. Returns
  // the saves made durable since the last wait() or poll().
  std::vector<SaveResult> wait();
  // Without waiting: the saves that became durable since the last wait()
  // or poll(); throws a background failure, as wait() does.
  std::vector<SaveResult> poll();
  // Removes this rank's checkpoints of steps after `step` (a rollback made
  // them describe steps that will run again), after the saves in flight;
  // the next save is a full base when the current base was among them.
  void discard_after(uint64_t step);

  // Loads the newest checkpoint that passes every check into `tensors` and
  // `meta`. Damaged newer ones are skipped and listed in the result (and
  // logged). Throws Error(data_loss) when none is good, Error(invalid_argument)
  // when a good one does not match the views (that is the caller's mistake,
  // not damage). Checkpoints of steps above `newest_step` are not considered
  // (ranks that must agree on a step restore the newest one they all hold).
  //
  // A step whose global manifest exists (every rank's shard was committed)
  // is read through it: on the same world size each rank reads its own
  // shard; on another world size replicated tensors come from one old rank
  // and split tensors are cut and joined from the old ranks' slices that
  // overlap this view (views may also be split where the saved tensor was
  // replicated, or whole where it was split; splitting along another
  // dimension than the saved one is refused). A local tensor on another
  // world size is read from the old rank with the same number when there is
  // one and the shape fits (what a data-parallel job whose ranks hold the
  // same state needs; logged), else refused. Metadata comes from the same
  // old rank, or rank 0 when there is none. A step without a global manifest (incomplete, or ranks on
  // disks of their own) is restored from this rank's shard when the world
  // size is the same, and skipped otherwise.
  RestoreResult restore(const std::vector<TensorView>& tensors, Metadata* meta,
                        uint64_t newest_step = UINT64_MAX);

  // This rank's committed shards, newest first.
  std::vector<ShardInfo> list() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A step folder as its global manifest tells it.
struct StepInfo {
  std::string path;
  uint64_t step = 0;
  bool complete = false;        // the global manifest is there and reads
  std::string problem;          // why not, when it is not
  uint32_t world = 0;           // from the global manifest, else from a shard
  std::vector<uint32_t> ranks;  // shards present
};
// The step folders of a job folder, newest first. A folder that does not
// exist has none.
SIGMA_EXPORT std::vector<StepInfo> list_steps(const std::string& job_dir);

// What a path is in the checkpoint layout, JOB/step-<20 digits>/rank-<5
// digits>/: a shard (a rank folder, or a folder holding a shard's files), a
// step folder, a job folder (one holding step folders), or none of them.
// Reads folder names only. Thread-safety: any thread.
enum class PathKind { shard, step, job, other };
SIGMA_EXPORT PathKind classify(const std::string& path);
// The job folders a path names: itself when it is one, else its children
// that are, sorted. Thread-safety: any thread.
SIGMA_EXPORT std::vector<std::string> list_jobs(const std::string& dir);
// The shard (rank) folders of a step folder, by rank. Thread-safety: any.
SIGMA_EXPORT std::vector<std::string> list_step_shards(const std::string& step_path);
// Writes the step's global manifest when every rank's shard of it is
// committed (durably: temporary file, fsync, rename, fsync of the folder;
// ranks racing to write it write the same thing). Returns whether the step
// is complete. Throws Error(data_loss) when the shards cannot be read or
// disagree (world sizes, dtypes, global shapes, slices that overlap or leave
// gaps), naming the shard and the tensor.
SIGMA_EXPORT bool finalize_step(const std::string& job_dir, uint64_t step);
// Checks a step's global manifest against its shards' manifests and, with
// `shards_too`, every hash of every shard. Throws Error(data_loss) naming the
// file and the check.
SIGMA_EXPORT void verify_step(const std::string& step_path, bool shards_too = true);

// Reads a shard's manifest (FlatBuffers verifier, bounds) without the data.
// Throws Error(data_loss) naming the file and the check that failed.
SIGMA_EXPORT ShardInfo inspect(const std::string& shard_path);
// Checks every hash of a shard (and of its base for a differential one) by
// decoding every chunk. Throws Error(data_loss) naming file, tensor, chunk and
// check.
SIGMA_EXPORT void verify(const std::string& shard_path);
// The committed shards below a job folder (any rank), newest first. A shard
// whose manifest cannot be read is listed with base_step -2.
SIGMA_EXPORT std::vector<ShardInfo> list_shards(const std::string& job_dir);
// One tensor of a shard, decoded, every hash checked. Throws Error(data_loss)
// for damage, Error(invalid_argument) when the shard has no such tensor.
SIGMA_EXPORT std::vector<uint8_t> read_tensor(const std::string& shard_path, const std::string& name);

// How one tensor differs between two shards: the elements whose bytes
// differ, the largest |a - b| and the root mean square of a - b over every
// element (values read as doubles). Both are decoded chunk by chunk side by
// side, every hash checked: memory stays two chunks whatever the tensor's
// size. Throws Error(invalid_argument) when a shard lacks the tensor or the
// two differ in dtype or shape, Error(data_loss) for damage.
struct TensorDiff {
  uint64_t elements = 0, changed = 0;
  double max_abs = 0, rms = 0;
};
SIGMA_EXPORT TensorDiff diff_tensor(const std::string& shard_a, const std::string& shard_b,
                                    const std::string& name);

// safetensors (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range, then the bytes. Export writes every tensor of a
// shard (and its metadata as "__metadata__" strings), durably.
SIGMA_EXPORT void export_safetensors(const std::string& shard_path, const std::string& out_path);
// Reads a safetensors file into owned tensors; the file is untrusted: the
// header is bounded (100 MiB), every range is checked against the file and
// the shape, overlaps are refused. Throws Error(invalid_argument) naming the
// file and the field.
struct OwnedTensor {
  std::string name;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
SIGMA_EXPORT std::vector<OwnedTensor> import_safetensors(const std::string& path,
                                                         std::map<std::string, std::string>* metadata);
// The same from bytes in memory (the fuzz target's entry); `name` in messages.
SIGMA_EXPORT std::vector<OwnedTensor> parse_safetensors(const uint8_t* data, uint64_t size,
                                                        const std::string& name,
                                                        std::map<std::string, std::string>* metadata);

}  // namespace sigma::checkpoint
