// TensorBoard event files written natively, so `tensorboard --logdir runs/` shows a run without any
// Python in the training path. The format is TensorFlow's TFRecord of `Event` protocol buffers:
// each record is [uint64 length][uint32 masked CRC-32C of the length][data][uint32 masked CRC-32C
// of the data], little-endian; the first event carries file_version "brain.Event:2". The few proto
// fields needed (Event.wall_time/step/file_version/summary, Summary.Value.tag/simple_value/tensor/
// metadata) are encoded here by hand: they are stable wire-format numbers, and linking protobuf for
// five fields would put a second protobuf next to LibTorch's (see docs/dependencies.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "core/config.h"
#include "core/status.h"

namespace lm {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), and TFRecord's masking of it.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

// Seconds since the Unix epoch (an event's wall_time).
double unix_seconds();

class TensorBoardWriter {
 public:
  // Creates DIR (if needed) and a new event file in it, named as TensorFlow names them
  // (events.out.tfevents.<seconds>.<host>.<pid>.lmforge) so the readers find it.
  static absl::StatusOr<TensorBoardWriter> open(const std::string& dir);
  TensorBoardWriter() = default;
  TensorBoardWriter(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&& other) noexcept;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  ~TensorBoardWriter();

  absl::Status add_scalar(std::string_view tag, int64_t step, double value, double wall_time);
  // Text shown in TensorBoard's Text tab (the text plugin's string tensor).
  absl::Status add_text(std::string_view tag, int64_t step, std::string_view text, double wall_time);
  // One metrics.jsonl line: every numeric field but "step" a scalar, nested objects joined with
  // '/' ("val_loss": {"bn": x} -> "val_loss/bn"); strings and booleans are skipped.
  absl::Status add_metrics(const Json& line, double wall_time);
  // A restart (SessionLog START) at `step`: TensorBoard drops the points of earlier files at and
  // after `step`, so a resumed run's curve has no doubled tail. A run resumed from the checkpoint
  // of step S marks S + 1: step S's point stays.
  absl::Status mark_start(int64_t step, double wall_time);
  absl::Status flush();
  const std::string& path() const { return path_; }

 private:
  absl::Status write_record(const std::string& event);
  absl::Status add_flattened(const std::string& prefix, const Json& value, int64_t step, double wall_time);
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace lm
