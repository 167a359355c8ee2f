// Observer data as text, for every view (the API's converters, /metrics).
#pragma once

#include <cstdint>
#include <string>

namespace lossd {

// An obs_tuple address as text (inet_ntop: "10.0.0.1", "fd00::1").
std::string AddrText(uint16_t family, const uint32_t* addr);

}  // namespace lossd
