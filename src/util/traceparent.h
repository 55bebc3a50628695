#pragma once
// The trace id of a W3C Trace Context `traceparent` header (https://www.w3.org/TR/trace-context/#traceparent-header),
// so log lines can name the trace a client's request belongs to. Pure; no allocation.
#include <string_view>

namespace prefixgate::util {

// The 32 lowercase hex digits of the trace id, or "" when the header is not a valid traceparent:
// "<version>-<trace-id>-<parent-id>-<flags>" with 2, 32, 16 and 2 lowercase hex digits, version not "ff", trace id
// and parent id not all zeros. Version 00 is exactly 55 characters; a later version may append "-<more>" (the
// specification asks readers to parse such headers as version 00). The view points into `header`.
std::string_view traceIdFromTraceparent(std::string_view header);

}  // namespace prefixgate::util
