// libFuzzer target of the state dir's record parsers (daemon/host/records.h), the
// lines a crashed lossd leaves and the next start applies to the host. Input: any
// bytes, cut into lines as ReadStateLines cuts a file; each line goes through both
// parsers. Besides crashes and sanitizer reports it checks what they promise:
//   - a record accepted lies in the kernel's ranges (an interface name of 1-15
//     bytes without space, '/', ':' or control bytes; gro 0 or 1; gso_max_segs
//     1..65535; an ifindex of 1..INT32_MAX, or 0 only in the old 3-field
//     offload form; a filter record's netns not 0);
//   - printing a record and parsing it again gives the same record;
//   - a line with a NUL byte, or with more fields than the form, is refused.
// Run: tests/fuzz/run.sh FUZZER [SECONDS] (ctest fuzz_records, label unit).
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "host/records.h"

namespace lossd {
namespace {

[[noreturn]] void Fail(const char* what, const std::string& line) {
  std::fprintf(stderr, "records_fuzz: %s: line of %zu bytes '%s'\n", what, line.size(),
               line.c_str());
  std::abort();
}

bool Same(const OffloadRecord& a, const OffloadRecord& b) {
  return a.netns == b.netns && a.ifindex == b.ifindex && a.ifname == b.ifname && a.gro == b.gro &&
         a.gso_max_segs == b.gso_max_segs;
}

bool Same(const FilterRecord& a, const FilterRecord& b) {
  return a.netns == b.netns && a.ifindex == b.ifindex && a.ifname == b.ifname;
}

size_t FieldCount(const std::string& line) {
  size_t n = 1;
  for (char c : line) n += c == ' ' || c == '\t';
  return n;
}

void CheckLine(const std::string& line) {
  bool nul = line.find('\0') != std::string::npos;
  OffloadRecord o;
  if (ParseOffloadRecord(line, &o)) {
    if (nul) Fail("an offload record with a NUL byte accepted", line);
    if (FieldCount(line) != 5 && FieldCount(line) != 3) Fail("an offload record of another form", line);
    if (!ValidIfname(o.ifname) || o.ifname.size() > 15) Fail("an invalid interface name", line);
    if (o.gro > 1) Fail("gro outside 0..1", line);
    if (o.gso_max_segs < 1 || o.gso_max_segs > 65535) Fail("gso_max_segs outside 1..65535", line);
    if (o.ifindex > static_cast<uint32_t>(INT32_MAX)) Fail("an ifindex past INT32_MAX", line);
    if (FieldCount(line) == 5 && o.ifindex == 0) Fail("a 5-field record with ifindex 0", line);
    OffloadRecord again;
    if (!ParseOffloadRecord(OffloadRecordLine(o), &again) || !Same(o, again))
      Fail("an offload record does not survive printing", line);
  }
  FilterRecord f;
  if (ParseFilterRecord(line, &f)) {
    if (nul) Fail("a filter record with a NUL byte accepted", line);
    if (FieldCount(line) != 3) Fail("a filter record of another form", line);
    if (!ValidIfname(f.ifname)) Fail("an invalid interface name", line);
    if (f.netns == 0 || f.ifindex == 0 || f.ifindex > static_cast<uint32_t>(INT32_MAX))
      Fail("a filter record's netns or ifindex out of range", line);
    FilterRecord again;
    if (!ParseFilterRecord(FilterRecordLine(f), &again) || !Same(f, again))
      Fail("a filter record does not survive printing", line);
  }
  for (unsigned char c : std::string(o.ifname + f.ifname))
    if (c <= ' ' || c == '/' || c == ':' || c >= 0x7f) Fail("a name byte the kernel never gives", line);
}

}  // namespace
}  // namespace lossd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  size_t at = 0;
  while (at <= in.size()) {
    size_t nl = in.find('\n', at);
    std::string line = in.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (!line.empty()) lossd::CheckLine(line);
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return 0;
}
