#include "core/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/log.h"

namespace lm {
namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrc32cTable = make_crc32c_table();

// Protocol-buffer wire format: tag = field << 3 | wire type (0 varint, 1 fixed64, 2 bytes, 5 fixed32).
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire); }
template <class T>
void put_fixed(std::string& out, int field, int wire, T value) {  // little-endian hosts only (x86, ARM)
  put_tag(out, field, wire);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}
void put_int(std::string& out, int field, int64_t v) {
  put_tag(out, field, 0);
  put_varint(out, static_cast<uint64_t>(v));
}

// Event{wall_time = 1 (double), step = 2 (int64), file_version = 3 | summary = 5 | session_log = 7}.
std::string event(double wall_time, int64_t step, int field, std::string_view payload) {
  std::string e;
  put_fixed(e, 1, 1, wall_time);
  put_int(e, 2, step);
  put_bytes(e, field, payload);
  return e;
}
// Summary{repeated Value value = 1}.
std::string summary_of(const std::string& value) {
  std::string s;
  put_bytes(s, 1, value);
  return s;
}

}  // namespace

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

uint32_t crc32c(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) c = kCrc32cTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

absl::StatusOr<TensorBoardWriter> TensorBoardWriter::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create the TensorBoard folder: ", ec.message()));
  const double secs = unix_seconds();
  TensorBoardWriter w;
  const std::string base = absl::StrCat(dir, "/events.out.tfevents.", static_cast<int64_t>(secs), ".", host_name("localhost"), ".",
                                        getpid(), ".lmforge");
  // x: never append to or replace another writer's file. A second start in the same second and
  // process (a resume right after a stop) takes base.1, base.2, ...: they sort after base, in order.
  for (int n = 0; !w.file_; ++n) {
    w.path_ = n == 0 ? base : absl::StrCat(base, ".", n);
    w.file_ = std::fopen(w.path_.c_str(), "wbx");
    if (!w.file_ && (errno != EEXIST || n >= 100)) return errno_status("open", w.path_, "nothing was written");
  }
  LM_RETURN_IF_ERROR(w.write_record(event(secs, 0, 3, "brain.Event:2")));
  LM_RETURN_IF_ERROR(w.flush());
  return w;
}

TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}
TensorBoardWriter& TensorBoardWriter::operator=(TensorBoardWriter&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}
TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

absl::Status TensorBoardWriter::write_record(const std::string& data) {
  if (!file_) return absl::FailedPreconditionError("TensorBoard writer is not open");
  char header[12];
  const uint64_t n = data.size();
  std::memcpy(header, &n, 8);
  const uint32_t len_crc = masked_crc32c(header, 8);
  std::memcpy(header + 8, &len_crc, 4);
  const uint32_t data_crc = masked_crc32c(data.data(), data.size());
  if (std::fwrite(header, 1, 12, file_) != 12 || std::fwrite(data.data(), 1, data.size(), file_) != data.size() ||
      std::fwrite(&data_crc, 1, 4, file_) != 4)
    return errno_status("write", path_, "metrics.jsonl still holds every logged value");
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::add_scalar(std::string_view tag, int64_t step, double value, double wall_time) {
  std::string v;  // Summary.Value{tag = 1, simple_value = 2 (float)}
  put_bytes(v, 1, tag);
  put_fixed(v, 2, 5, static_cast<float>(value));
  return write_record(event(wall_time, step, 5, summary_of(v)));
}

absl::Status TensorBoardWriter::add_text(std::string_view tag, int64_t step, std::string_view text,
                                         double wall_time) {
  std::string plugin, metadata, shape, tensor, v;
  put_bytes(plugin, 1, "text");      // PluginData{plugin_name = 1}
  put_bytes(metadata, 1, plugin);    // SummaryMetadata{plugin_data = 1}
  put_int(tensor, 1, 7);             // TensorProto{dtype = 1: DT_STRING (7),
  put_bytes(tensor, 2, shape);       //   tensor_shape = 2: a scalar (no dims),
  put_bytes(tensor, 8, text);        //   string_val = 8}
  put_bytes(v, 1, tag);              // Summary.Value{tag = 1, metadata = 9, tensor = 8}
  put_bytes(v, 9, metadata);
  put_bytes(v, 8, tensor);
  return write_record(event(wall_time, step, 5, summary_of(v)));
}

absl::Status TensorBoardWriter::add_flattened(const std::string& prefix, const Json& value, int64_t step,
                                              double wall_time) {
  if (value.is_object()) {
    for (const auto& [key, x] : value.items())
      LM_RETURN_IF_ERROR(add_flattened(prefix.empty() ? key : prefix + "/" + key, x, step, wall_time));
  } else if (value.is_number()) {
    LM_RETURN_IF_ERROR(add_scalar(prefix, step, value.get<double>(), wall_time));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::add_metrics(const Json& line, double wall_time) {
  if (!line.is_object() || !line.contains("step") || !line["step"].is_number_integer())
    return absl::InvalidArgumentError("TensorBoard: a metrics line needs an integer \"step\"");
  const int64_t step = line["step"].get<int64_t>();
  for (const auto& [key, x] : line.items())
    if (key != "step") LM_RETURN_IF_ERROR(add_flattened(key, x, step, wall_time));
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::mark_start(int64_t step, double wall_time) {
  std::string log;  // SessionLog{status = 1: START (1)}
  put_int(log, 1, 1);
  return write_record(event(wall_time, step, 7, log));  // Event.session_log = 7
}

absl::Status TensorBoardWriter::flush() {
  if (file_ && std::fflush(file_) != 0) return errno_status("flush", path_, "metrics.jsonl still holds every logged value");
  return absl::OkStatus();
}

}  // namespace lm
