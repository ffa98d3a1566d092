#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/runtime.h"
#include "core/config.h"
#include "core/file.h"
#include "core/log.h"
#include "core/status.h"

namespace {

struct Inner {
  double lr = 1e-3;
  std::vector<int> steps;
  template <class V>
  void visit(V& v) {
    v("lr", lr);
    v("steps", steps);
  }
};
struct Outer {
  int64_t batch = 8;
  std::string name = "x";
  bool flag = false;
  Inner optim;
  template <class V>
  void visit(V& v) {
    v("batch", batch);
    v("name", name);
    v("flag", flag);
    v("optim", optim);
  }
};

TEST(Config, UnknownKeyNamesDottedPath) {
  Outer o;
  auto st = lm::from_json(lm::Json::parse(R"({"optim": {"lr": 0.1, "betas": [0.9]}})"), o);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("optim.betas: unknown key"), std::string::npos) << st;
}

TEST(Config, WrongTypeNamesPathAndType) {
  Outer o;
  auto st = lm::from_json(lm::Json::parse(R"({"batch": "eight"})"), o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("batch: expected an integer, got string"), std::string::npos) << st;
  st = lm::from_json(lm::Json::parse(R"({"optim": {"steps": [1, 2.5]}})"), o);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("optim.steps[1]"), std::string::npos) << st;
}

TEST(Config, RoundTripAndLayering) {
  Outer o;
  ASSERT_TRUE(lm::from_json(lm::Json::parse(R"({"batch": 2e3, "optim": {"steps": [3]}})"), o).ok());
  EXPECT_EQ(o.batch, 2000);
  EXPECT_EQ(o.name, "x");  // absent keys keep defaults
  ASSERT_TRUE(lm::from_json(lm::Json::parse(R"({"name": "y"})"), o).ok());
  EXPECT_EQ(o.batch, 2000);  // a later layer only overrides what it names
  lm::Json j = lm::to_json(o);
  Outer back;
  ASSERT_TRUE(lm::from_json(j, back).ok());
  EXPECT_EQ(lm::to_json(back), j);
  EXPECT_EQ(j["optim"]["steps"][0], 3);
}

// A number beyond double's range makes nlohmann throw out_of_range, not parse_error; it must come
// back as a Status like any other bad JSON (fuzz_config, tests/fuzz/corpus/fuzz_config/crash-number-overflow).
TEST(Config, NumberOverflowIsAnErrorNotACrash) {
  auto j = lm::parse_json(R"({"lr": 2e9000})", "run.json");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(std::string(j.status().message()).find("run.json:1: not valid JSON"), std::string::npos) << j.status();
}

// Syntax errors name FILE:LINE:COLUMN (lines counted from first_line for one line of a JSONL
// file) and quote a bounded part of the parser's message, however long the damaged text is.
TEST(Config, ParseErrorNamesLineAndColumnAndStaysShort) {
  auto a = lm::parse_json("{\"train\": {\n  \"steps\": 3,\n}", "bad.json");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(std::string(a.status().message()).find("bad.json:3:1: not valid JSON"), std::string::npos) << a.status();
  auto b = lm::parse_json("{\"x\": tru}", "val.jsonl", 41);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string(b.status().message()).find("val.jsonl:41:"), std::string::npos) << b.status();
  auto c = lm::parse_json("{\"x\": \"" + std::string(100000, 'a'), "trainer.json");
  ASSERT_FALSE(c.ok());
  EXPECT_LT(c.status().message().size(), 400u);
}

TEST(Config, NonIntegerFloatIsRejected) {
  Outer o;
  EXPECT_FALSE(lm::from_json(lm::Json::parse(R"({"batch": 2.5})"), o).ok());
}

// Out-of-range integers used to wrap silently (4294967297 read into an int as 1) or, written as
// floats, hit a static_cast outside the type's range (undefined behaviour; fuzz_config input
// tests/fuzz/corpus/fuzz_config/crash-int-range).
struct Ints {
  int32_t threads = 0;
  uint64_t seed = 0;
  int64_t steps = 0;
  template <class V>
  void visit(V& v) {
    v("threads", threads);
    v("seed", seed);
    v("steps", steps);
  }
};

TEST(Config, IntegerOutOfRangeIsAnError) {
  for (const char* bad : {R"({"threads": 4294967297})", R"({"threads": 1e10})", R"({"threads": 2147483648})",
                          R"({"seed": -5.0})", R"({"seed": 1.8446744073709552e19})", R"({"steps": 9.3e18})",
                          R"({"steps": 18446744073709551615})"}) {
    Ints x;
    auto st = lm::from_json(lm::Json::parse(bad), x);
    ASSERT_FALSE(st.ok()) << bad << " read as " << x.threads << " " << x.seed << " " << x.steps;
    EXPECT_NE(std::string(st.message()).find("expected an integer in ["), std::string::npos) << st;
  }
  Ints x;
  ASSERT_TRUE(lm::from_json(lm::Json::parse(
      R"({"threads": 2147483647, "seed": 18446744073709551615, "steps": -9223372036854775808})"), x).ok());
  EXPECT_EQ(x.threads, 2147483647);
  EXPECT_EQ(x.seed, 18446744073709551615ULL);
  EXPECT_EQ(x.steps, std::numeric_limits<int64_t>::min());
}

// The progress line once had one %s fewer than its arguments: gcc cannot check absl formats at
// compile time, and at run time a mismatched StrFormat returns "", so the line lost its label,
// percentage and rate (clang-14's check in the fuzz build found it).
TEST(Log, ProgressLineHasLabelPercentAndRate) {
  lm::output_options().quiet = false;
  lm::output_options().interactive = false;
  lm::Progress p("prepare", 2000, "tok");
  testing::internal::CaptureStderr();
  p.finish("loss 3.21");
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("prepare 100.0% 2.0k/2.0k tok "), std::string::npos) << out;
  EXPECT_NE(out.find("tok/s in "), std::string::npos) << out;
  EXPECT_NE(out.find("| loss 3.21"), std::string::npos) << out;
}

// Issue 30 item 10: after a resume at step 40 of 60, 10 steps in 100 s are 0.10 steps/s and 1m40s
// to go (the whole run's 50 steps over this invocation's 100 s said 0.50 steps/s and 20s).
TEST(Log, ProgressRateAndEtaCountFromThisInvocationsStart) {
  const std::string mid = lm::Progress::line("train", 50, 60, "steps", 40, 100, false, "");
  EXPECT_NE(mid.find("50/60 steps 0.10 steps/s ETA 1m40s"), std::string::npos) << mid;
  const std::string fresh = lm::Progress::line("train", 50, 60, "steps", 0, 100, false, "");
  EXPECT_NE(fresh.find("50/60 steps 0.50 steps/s ETA 20s"), std::string::npos) << fresh;
}

TEST(File, AtomicWriteReplacesAndLeavesNoTemp) {
  auto dir = std::filesystem::temp_directory_path() / ("lm_core_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "a.txt").string();
  ASSERT_TRUE(lm::write_file_atomic(path, "first").ok());
  ASSERT_TRUE(lm::write_file_atomic(path, "second").ok());
  auto got = lm::read_file(path);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "second");
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) { (void)e; ++files; }
  EXPECT_EQ(files, 1);  // no temp file left behind
  auto missing = lm::write_file_atomic((dir / "no/such/dir/x").string(), "x");
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(lm::exit_code_for(missing), 2);
  std::filesystem::remove_all(dir);
}

TEST(File, RemoveTreeRemovesEverythingButFollowsNoLink) {
  namespace fs = std::filesystem;
  const fs::path base = fs::temp_directory_path() / ("lm_remove_tree_" + std::to_string(getpid()));
  const fs::path tree = base / "tree", outside = base / "outside";
  fs::create_directories(tree / "a" / "b" / "c");
  fs::create_directories(outside);
  ASSERT_TRUE(lm::write_file_atomic((tree / "a" / "b" / "c" / "x").string(), "x").ok());
  ASSERT_TRUE(lm::write_file_atomic((tree / "top").string(), "t").ok());
  ASSERT_TRUE(lm::write_file_atomic((outside / "keep").string(), "k").ok());
  fs::create_directory_symlink(outside, tree / "a" / "link");  // removed as a link, not walked into
  ASSERT_TRUE(lm::remove_tree(tree.string()).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(tree)));
  EXPECT_TRUE(fs::exists(outside / "keep"));
  EXPECT_TRUE(lm::remove_tree(tree.string()).ok());  // already gone: nothing to do
  // A plain file is removed too.
  ASSERT_TRUE(lm::write_file_atomic((base / "file").string(), "f").ok());
  ASSERT_TRUE(lm::remove_tree((base / "file").string()).ok());
  EXPECT_FALSE(fs::exists(base / "file"));
  ASSERT_TRUE(lm::remove_tree(base.string()).ok());
  EXPECT_FALSE(fs::exists(base));
}

TEST(File, MmapAndChecksums) {
  auto path = std::filesystem::temp_directory_path() / ("lm_mmap_" + std::to_string(getpid()));
  ASSERT_TRUE(lm::write_file_atomic(path.string(), "123456789").ok());
  auto m = lm::MappedFile::open(path.string());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->size(), 9u);
  EXPECT_EQ(lm::crc32(m->data(), m->size()), 0xCBF43926u);  // the CRC-32 check value
  EXPECT_EQ(lm::hex64(lm::fnv1a64("", 0)), "cbf29ce484222325");
  std::filesystem::remove(path);
  EXPECT_EQ(lm::exit_code_for(lm::MappedFile::open(path.string()).status()), 2);
}

absl::StatusOr<int> half(int x) {
  if (x % 2) return absl::InvalidArgumentError("odd");
  return x / 2;
}
absl::Status quarter(int x, int* out) {
  LM_ASSIGN_OR_RETURN(int h, half(x));
  LM_ASSIGN_OR_RETURN(*out, half(h));
  LM_RETURN_IF_ERROR(absl::OkStatus());
  return absl::OkStatus();
}

TEST(Status, Macros) {
  int out = 0;
  EXPECT_TRUE(quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  EXPECT_EQ(quarter(6, &out).message(), "odd");
  EXPECT_EQ(lm::exit_code_for(absl::InternalError("x")), 1);
  EXPECT_EQ(lm::annotate(absl::NotFoundError("gone"), "f.json").message(), "f.json: gone");
}

TEST(Log, Formatting) {
  EXPECT_EQ(lm::format_duration(3725), "1h02m");
  EXPECT_EQ(lm::format_duration(65), "1m05s");
  EXPECT_EQ(lm::format_count(1.5e6), "1.50M");
}

}  // namespace

// The shipped build (the torch wheel, scripts/build.sh) has CUDA, cuDNN and NCCL compiled in,
// GPU or not; CMake's LM_REQUIRE_CUDA (on in scripts/build.sh, CI and the images) makes this
// test insist on it. A CPU-only LibTorch (Debian 13's libtorch-dev) builds without it.
TEST(BuildInfo, CudaAndNcclCompiledInTheShippedBuild) {
  const lm::BuildInfo b = lm::build_info();
  EXPECT_EQ(b.torch.rfind("2.", 0), 0u) << b.torch;
#if defined(LM_REQUIRE_CUDA_BUILD)
  EXPECT_TRUE(b.cuda_compiled);
  EXPECT_FALSE(b.cuda.empty());
  EXPECT_FALSE(b.cudnn.empty());
  EXPECT_TRUE(b.nccl_compiled);
  EXPECT_EQ(b.nccl.rfind("2.", 0), 0u) << "NCCL version '" << b.nccl << "'";
#else
  GTEST_SKIP() << "built without LM_REQUIRE_CUDA (a CPU-only LibTorch is allowed)";
#endif
}

TEST(BuildInfo, VersionReportNamesEveryPart) {
  const std::string r = lm::version_report("lmtrain");
  EXPECT_NE(r.find("lmtrain 0.1.0; LibTorch 2."), std::string::npos) << r;
  EXPECT_NE(r.find("; device "), std::string::npos) << r;
  EXPECT_NE(r.find("BLAS"), std::string::npos) << r;
  const lm::BuildInfo b = lm::build_info();
  if (b.cuda_compiled) {
    EXPECT_NE(r.find("CUDA " + b.cuda + " (cuDNN " + b.cudnn + ", NCCL "), std::string::npos) << r;
    EXPECT_NE(r.find("compiled in"), std::string::npos) << r;
  } else {
    EXPECT_NE(r.find("CUDA not compiled in"), std::string::npos) << r;
  }
}
