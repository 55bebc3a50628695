#pragma once
// The client's request head as the session reads it and the relay forwards it.
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

#include "util/recycling_allocator.h"

namespace prefixgate::proxy {

// Header fields whose blocks come from the thread's recycled ones: the request path's heads allocate nothing in the
// steady state.
using Fields = boost::beast::http::basic_fields<util::RecyclingAllocator<char>>;
using ClientHead = boost::beast::http::request_header<Fields>;

}  // namespace prefixgate::proxy
