// The one way lossd writes JSON outside lossd.v1 (the one-shot reports, the
// observer's lines): nlohmann-json objects that keep their keys' order,
// dumped on one line with every string escaped.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace lossd {

using Json = nlohmann::ordered_json;

// One line of JSON; invalid UTF-8 (an interface name is bytes) becomes
// U+FFFD instead of an exception.
inline std::string JsonLine(const Json& j) {
  try {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
  } catch (const Json::exception& e) {  // not expected with `replace`; never across the boundary
    return Json{{"error", std::string("cannot render JSON: ") + e.what()}}.dump(
        -1, ' ', true, Json::error_handler_t::replace);
  }
}

}  // namespace lossd
