// The stop signals (SIGINT, SIGTERM) routed to one handler: the training loop's flag
// (runtime/runtime.cpp), the demo's and the local launcher's forwarding to their children.
#pragma once

#include <signal.h>

namespace lm {

// `handler` must be async-signal-safe. Not SA_RESTART: a blocking wait returns EINTR and the
// caller's loop looks at what the handler recorded.
inline void on_stop_signals(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace lm
