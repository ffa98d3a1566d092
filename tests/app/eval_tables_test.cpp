// The tables lmeval prints are made from the result JSON alone (app/eval_tables.h): rows in the
// --tasks order, numbers as the JSON has them, "-" for what the harness does not report.
#include "app/eval_tables.h"

#include <gtest/gtest.h>

namespace lm::app {
namespace {

Json task(double acc, bool acc_only) {
  Json t = {{"n", 100}, {"chance", 0.25}, {"acc", acc}, {"acc_stderr", 0.04}, {"split", "validation"}};
  if (!acc_only) t.update({{"acc_norm", 0.5}, {"acc_norm_stderr", 0.05}, {"acc_bytes", 0.45}, {"acc_bytes_stderr", 0.05}});
  return t;
}

TEST(EvalTables, McRowsInTaskOrderWithDashes) {
  eval::McOptions o;
  o.run.run = "runs/x";
  o.tasks = {"piqa", "copa"};  // not alphabetical: the JSON object is
  const Json r = {{"step", 80}, {"prefix", "bos"}, {"tasks", {{"copa", task(0.61, true)}, {"piqa", task(0.5, false)}}}};
  const std::string s = mc_table(o, r);
  EXPECT_NE(s.find("MC  run runs/x  step 80  prefix bos"), std::string::npos) << s;
  const size_t piqa = s.find("\npiqa "), copa = s.find("\ncopa ");
  ASSERT_NE(piqa, std::string::npos) << s;
  ASSERT_NE(copa, std::string::npos) << s;
  EXPECT_LT(piqa, copa) << s;
  const std::string copa_row = s.substr(copa + 1, s.find('\n', copa + 1) - copa - 1);
  EXPECT_NE(copa_row.find("0.6100±0.0400"), std::string::npos) << copa_row;
  EXPECT_NE(copa_row.find(" - "), std::string::npos) << copa_row;  // acc_norm of an acc-only task
  EXPECT_NE(s.find("0.5000±0.0500"), std::string::npos) << s;     // piqa's acc_norm
}

// Issue 30 item 2: the examples too long for the model's context are a column of their own and a
// closing line; a task with nothing scored shows dashes, not 0.
TEST(EvalTables, McSkippedTooLongColumnAndNote) {
  eval::McOptions o;
  o.run.run = "runs/x";
  o.tasks = {"piqa", "copa"};
  Json piqa = task(0.5, false);
  piqa["n"] = 142;
  piqa["skipped_too_long"] = 58;
  Json copa = {{"n", 0}, {"chance", 0.5}, {"acc", nullptr}, {"acc_stderr", nullptr}, {"skipped_too_long", 100},
               {"split", "validation"}};
  const Json r = {{"step", 80}, {"prefix", "bos"}, {"model", {{"max_seq_len", 256}}},
                  {"tasks", {{"copa", copa}, {"piqa", piqa}}}};
  const std::string s = mc_table(o, r);
  const size_t h = s.find('\n') + 1;
  const std::string header = s.substr(h, s.find('\n', h) - h);
  EXPECT_NE(header.find("     n too long  chance"), std::string::npos) << header;
  const size_t at = s.find("\npiqa ");
  ASSERT_NE(at, std::string::npos) << s;
  const std::string row = s.substr(at + 1, s.find('\n', at + 1) - at - 1);
  EXPECT_NE(row.find(" 142       58 "), std::string::npos) << row;
  const size_t c = s.find("\ncopa ");
  ASSERT_NE(c, std::string::npos) << s;
  const std::string copa_row = s.substr(c + 1, s.find('\n', c + 1) - c - 1);
  EXPECT_EQ(copa_row.find("0.0000"), std::string::npos) << copa_row;
  EXPECT_NE(s.find("158 examples not scored"), std::string::npos) << s;
  EXPECT_NE(s.find("context of 256 tokens"), std::string::npos) << s;
  EXPECT_NE(s.find("--strict"), std::string::npos) << s;
}

TEST(EvalTables, NllRowsWithTwin) {
  eval::NllOptions o;
  o.run.run = "runs/x";
  o.run.twin = true;
  const Json r = {{"step", 80},
                  {"seq_len", 128},
                  {"languages",
                   {{"bn",
                     {{"model", {{"tokens", 1000}, {"nats_per_token", 3.25}, {"perplexity", 25.79}, {"bits_per_byte", 1.5},
                                 {"bits_per_char", 2.0}}},
                      {"twin", {{"tokens", 1000}, {"nats_per_token", 6.24}, {"perplexity", 512.0}, {"bits_per_byte", 3.0}}},
                      {"twin_minus_model", {{"nats_per_token", 2.99}}}}}}}};
  const std::string s = nll_table(o, r);
  EXPECT_NE(s.find("step 80  seq_len 128"), std::string::npos) << s;
  const size_t bn = s.find("\nbn ");
  ASSERT_NE(bn, std::string::npos) << s;
  const std::string row = s.substr(bn + 1);
  for (const char* want : {"1000", "3.2500", "25.79", "1.5000", "2.0000", "6.2400", "512.0", "2.9900"})
    EXPECT_NE(row.find(want), std::string::npos) << want << " not in " << row;
}

}  // namespace
}  // namespace lm::app
