// The live page's files (daemon/live/web/), built into lossd by
// daemon/live/embed.cmake: one binary serves the page, nothing to install.
#pragma once

#include <cstddef>

namespace lossd {

extern const char kLiveIndexHtml[];
extern const size_t kLiveIndexHtmlSize;
extern const char kLiveJs[];
extern const size_t kLiveJsSize;
extern const char kLiveCss[];
extern const size_t kLiveCssSize;

}  // namespace lossd
