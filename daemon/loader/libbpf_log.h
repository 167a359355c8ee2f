// libbpf's own messages through lossd's log (base/log.h): its chatter at
// debug level, its warnings at warn.
#pragma once

namespace lossd {

void RouteLibbpfLogs();

}  // namespace lossd
