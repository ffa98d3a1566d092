// The flags of `lmtrain fit` that override the training config: `--set KEY=VALUE` by dotted key
// and the short aliases of train::flag_aliases() (`--lr` = `--set optimizer.lr=`), all collected in
// command-line order into a TrainOverrides. One definition for the command and for the test that
// parses `lmtrain plan`'s printed fit command (tests/train/plan_test.cpp), so the plan can only
// print flags fit understands.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "train/config.h"

namespace lm::app {

inline void add_train_flags(CLI::App* sub, train::TrainOverrides& t) {
  // Text only: set_dotted reads it as the field's type, with the config file's checks and a
  // message naming the flag and the dotted field.
  for (const train::FlagAlias& a : train::flag_aliases()) {
    const std::string flag = a.flag, key = a.key;
    sub->add_option_function<std::string>(
           flag, [&t, flag, key](const std::string& v) { t.items.push_back({key, v, flag}); },
           std::string(a.help) + " (= --set " + key + "=...)")
        ->type_name("VALUE");
  }
  sub->add_option_function<std::vector<std::string>>(
         "--set",
         [&t](const std::vector<std::string>& sets) {
           for (const auto& s : sets) {
             const absl::Status st = t.add_set(s);
             if (!st.ok()) throw CLI::ValidationError("--set", std::string(st.message()));
           }
         },
         "KEY=VALUE: set a field of the training config by dotted key, e.g. --set optimizer.lr=3e-4 "
         "--set schedule.kind=wsd (sections and keys: docs/architecture.md, 'Configuration'); repeatable")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
}

}  // namespace lm::app
