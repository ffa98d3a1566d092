// Loads liblm_spm.so (SentencePiece) with deep binding and forwards the bridge calls to it.
#include "tokenizer/spm_bridge.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <mutex>

#ifndef LM_SPM_MODULE_PATH
#define LM_SPM_MODULE_PATH ""
#endif

namespace lm::tokenizer::bridge {
namespace {

struct Loaded {
  const SpmApi* api = nullptr;
  std::string error;
};

std::string exe_dir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.find_last_of('/'));
}

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("LM_SPM_MODULE"); env && *env) candidates.push_back(env);
    const std::string dir = exe_dir();
    if (!dir.empty()) {
      candidates.push_back(dir + "/liblm_spm.so");
      candidates.push_back(dir + "/../lib/liblm_spm.so");
    }
    if (*LM_SPM_MODULE_PATH) candidates.push_back(LM_SPM_MODULE_PATH);
    std::string tried;
    for (const auto& c : candidates) {
      if (::access(c.c_str(), R_OK) != 0) {
        tried += " " + c;
        continue;
      }
      void* h = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!h) {
        r.error = std::string("cannot load SentencePiece module ") + c + ": " + ::dlerror();
        return r;
      }
      auto fn = reinterpret_cast<const SpmApi* (*)()>(::dlsym(h, "lm_spm_api"));
      if (!fn || fn()->version != kSpmApiVersion) {
        r.error = c + ": not a matching liblm_spm.so (rebuild the tokenizer library)";
        return r;
      }
      r.api = fn();
      return r;
    }
    r.error = "SentencePiece module liblm_spm.so not found (looked at" + tried +
              "); set LM_SPM_MODULE to its path or install it beside the executable";
    return r;
  }();
  return l;
}

}  // namespace

std::string module_error() { return loaded().error; }

std::shared_ptr<const Sp> load_model(const std::string& bytes, std::string* error) {
  if (!loaded().api) {
    *error = loaded().error;
    return nullptr;
  }
  return loaded().api->load_model(bytes, error);
}
// The calls below need a model, which only exists when the module loaded.
void encode(const Sp& sp, std::string_view text, std::vector<int32_t>* ids) { loaded().api->encode(sp, text, ids); }
std::string decode(const Sp& sp, const std::vector<int32_t>& ids) { return loaded().api->decode(sp, ids); }
SpInfo info(const Sp& sp) { return loaded().api->info(sp); }
bool is_byte(const Sp& sp, int32_t id) { return loaded().api->is_byte(sp, id); }
bool is_unknown(const Sp& sp, int32_t id) { return loaded().api->is_unknown(sp, id); }
bool is_control(const Sp& sp, int32_t id) { return loaded().api->is_control(sp, id); }
std::string id_to_piece(const Sp& sp, int32_t id) { return loaded().api->id_to_piece(sp, id); }

bool train(const std::unordered_map<std::string, std::string>& kwargs, const std::vector<std::string>& sentences,
           std::string* model_bytes, std::string* error) {
  if (!loaded().api) {
    *error = loaded().error;
    return false;
  }
  return loaded().api->train(kwargs, sentences, model_bytes, error);
}

void set_log_level(int level) {
  if (loaded().api) loaded().api->set_log_level(level);
}

}  // namespace lm::tokenizer::bridge
