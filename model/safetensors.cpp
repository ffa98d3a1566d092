#include "model/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>

#include "core/config.h"
#include "core/file.h"

namespace lm::model {
namespace {

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
  int64_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2}, {"BF16", torch::kBFloat16, 2},
    {"F64", torch::kFloat64, 8}, {"I64", torch::kInt64, 8},   {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},     {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

const DtypeInfo* by_type(torch::ScalarType t) {
  for (const auto& d : kDtypes) if (d.type == t) return &d;
  return nullptr;
}
const DtypeInfo* by_name(const std::string& n) {
  for (const auto& d : kDtypes) if (n == d.name) return &d;
  return nullptr;
}

}  // namespace

const char* safetensors_dtype_name(torch::ScalarType t) {
  const DtypeInfo* d = by_type(t);
  return d == nullptr ? nullptr : d->name;
}

std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> cpu;
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    const DtypeInfo* d = by_type(c.scalar_type());
    TORCH_CHECK(d != nullptr, "safetensors: unsupported dtype for ", name);
    const int64_t nbytes = c.numel() * d->size;
    header[name] = {{"dtype", d->name},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    cpu.push_back(c);
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');  // keep the data 8-byte aligned
  std::string out;
  out.reserve(8 + h.size() + offset);
  uint64_t hlen = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((hlen >> (8 * i)) & 0xff));
  out += h;
  for (const auto& c : cpu) {
    out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  }
  return out;
}

absl::Status save_safetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata) {
  return write_file_atomic(path, encode_safetensors(tensors, metadata));
}

namespace {

struct Header {
  int64_t data_offset = 0;
  std::vector<SafetensorsEntry> entries;  // in JSON (name) order
  std::map<std::string, std::string> metadata;
};

// One tensor's header entry: dtype, shape, data_offsets checked against the data's size.
absl::StatusOr<SafetensorsEntry> parse_entry(const std::string& name, const Json& e, uint64_t data_size,
                                             const std::function<absl::Status(const std::string&)>& bad) {
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
    return bad(name + ": needs dtype, shape and data_offsets");
  if (!e["dtype"].is_string()) return bad(name + ".dtype is not a string");
  const DtypeInfo* d = by_name(e["dtype"].get<std::string>());
  if (d == nullptr) return bad(name + ".dtype: unsupported '" + e["dtype"].get<std::string>() + "'");
  SafetensorsEntry out;
  out.name = name;
  out.dtype = d->type;
  int64_t numel = 1;
  if (!e["shape"].is_array()) return bad(name + ".shape is not an array");
  for (const auto& s : e["shape"]) {
    if (!s.is_number_integer() || s.get<int64_t>() < 0) return bad(name + ".shape has a bad entry");
    out.shape.push_back(s.get<int64_t>());
    numel *= out.shape.back();
  }
  const Json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_integer() || !off[1].is_number_integer())
    return bad(name + ".data_offsets must be [begin, end]");
  out.begin = off[0].get<int64_t>();
  out.end = off[1].get<int64_t>();
  if (out.begin < 0 || out.end < out.begin || static_cast<uint64_t>(out.end) > data_size)
    return bad(absl::StrCat(name, ".data_offsets [", out.begin, ", ", out.end, "] outside the data (", data_size, " bytes)"));
  if (out.end - out.begin != numel * d->size)
    return bad(absl::StrCat(name, ": shape needs ", numel * d->size, " bytes but data_offsets span ", out.end - out.begin));
  return out;
}

// Parses and validates the header of a whole file's bytes; errors name the file, the tensor and the field.
absl::StatusOr<Header> parse_header(std::string_view bytes, const std::string& source) {
  std::function<absl::Status(const std::string&)> bad = [&](const std::string& m) {
    return absl::DataLossError(source + ": " + m + " (the file is corrupt or not safetensors; re-export or restore it)");
  };
  if (bytes.size() < 8) return bad("shorter than the 8-byte header length");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  if (hlen > bytes.size() - 8) {
    return bad(absl::StrCat("header length ", hlen, " exceeds file size ", bytes.size()));
  }
  Json header;
  try {
    header = Json::parse(bytes.substr(8, hlen));
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number beyond double
    return bad(absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) return bad("header is not a JSON object");
  Header out;
  out.data_offset = static_cast<int64_t>(8 + hlen);
  const uint64_t data_size = bytes.size() - 8 - hlen;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const Json& e = it.value();
    if (it.key() == "__metadata__") {
      if (!e.is_object()) return bad("__metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) return bad("__metadata__." + m.key() + " is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    LM_ASSIGN_OR_RETURN(auto entry, parse_entry(it.key(), e, data_size, bad));
    out.entries.push_back(std::move(entry));
  }
  std::vector<const SafetensorsEntry*> spans;
  for (const auto& e : out.entries) spans.push_back(&e);
  std::sort(spans.begin(), spans.end(), [](const auto* a, const auto* c) { return a->begin < c->begin; });
  int64_t pos = 0;
  for (const auto* s : spans) {
    if (s->begin != pos) return bad(absl::StrCat(s->name, ": data_offsets overlap or leave a hole at byte ", pos));
    pos = s->end;
  }
  if (static_cast<uint64_t>(pos) != data_size)
    return bad(absl::StrCat("data has ", data_size - pos, " trailing bytes no tensor claims"));
  return out;
}

}  // namespace

absl::StatusOr<SafetensorsFile> decode_safetensors(std::string_view bytes,
                                                   const std::string& source) {
  LM_ASSIGN_OR_RETURN(Header h, parse_header(bytes, source));
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  const char* data = bytes.data() + h.data_offset;
  for (const auto& e : h.entries) {
    auto t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, t);
  }
  return out;
}

absl::StatusOr<SafetensorsFile> load_safetensors(const std::string& path) {
  LM_ASSIGN_OR_RETURN(auto f, MappedFile::open(path));
  return decode_safetensors(
      std::string_view(reinterpret_cast<const char*>(f.data()), f.size()), path);
}

absl::StatusOr<MappedSafetensors> MappedSafetensors::open(const std::string& path) {
  MappedSafetensors m;
  LM_ASSIGN_OR_RETURN(m.file_, MappedFile::open(path));
  LM_ASSIGN_OR_RETURN(Header h, parse_header(std::string_view(reinterpret_cast<const char*>(m.file_.data()),
                                                              m.file_.size()), path));
  m.path_ = path;
  m.data_offset_ = h.data_offset;
  m.entries_ = std::move(h.entries);
  std::sort(m.entries_.begin(), m.entries_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
  m.metadata_ = std::move(h.metadata);
  return m;
}

const SafetensorsEntry* MappedSafetensors::find(const std::string& name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const SafetensorsEntry& e, const std::string& n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

torch::Tensor MappedSafetensors::view(const SafetensorsEntry& e) const {
  const uint8_t* p = file_.data() + data_offset_ + e.begin;
  const auto opts = torch::TensorOptions().dtype(e.dtype);
  const int64_t esize = static_cast<int64_t>(c10::elementSize(e.dtype));
  if (reinterpret_cast<uintptr_t>(p) % esize == 0)
    return torch::from_blob(const_cast<uint8_t*>(p), e.shape, opts);
  auto t = torch::empty(e.shape, opts);  // a header whose length is not a multiple of the element size
  if (e.end > e.begin) std::memcpy(t.data_ptr(), p, e.end - e.begin);
  return t;
}

void MappedSafetensors::release(const SafetensorsEntry& e) const {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto b = reinterpret_cast<uintptr_t>(file_.data() + data_offset_ + e.begin);
  const auto en = reinterpret_cast<uintptr_t>(file_.data() + data_offset_ + e.end);
  const uintptr_t lo = (b + page - 1) / page * page, hi = en / page * page;  // whole pages of this tensor only
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

NamedTensors module_state(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& p : module.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

absl::Status load_module_state(torch::nn::Module& module, const SafetensorsFile& file,
                               const std::string& source, bool allow_dtype_cast) {
  std::map<std::string, torch::Tensor> have;
  for (const auto& [n, t] : file.tensors) have[n] = t;
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (auto& [name, dst] : module_state(module)) {
    auto it = have.find(name);
    if (it == have.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(source, ": tensor '", name, "' is missing (the file is from another model config?)"));
    }
    const auto& src = it->second;
    if (src.sizes() != dst.sizes()) {
      std::ostringstream m;
      m << source << ": tensor '" << name << "' has shape " << src.sizes() << " but the model expects "
        << dst.sizes() << " (checkpoint from another preset or vocab size?)";
      return absl::FailedPreconditionError(m.str());
    }
    if (src.scalar_type() != dst.scalar_type() && !allow_dtype_cast) {
      return absl::FailedPreconditionError(absl::StrCat(
          source, ": tensor '", name, "' is ", c10::toString(src.scalar_type()), " but the model holds ",
          c10::toString(dst.scalar_type())));
    }
    dst.copy_(src);
    used.insert(name);
  }
  for (const auto& [n, t] : file.tensors) {
    if (!used.count(n)) {
      return absl::FailedPreconditionError(
          absl::StrCat(source, ": tensor '", n, "' does not exist in this model (another config?)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lm::model
