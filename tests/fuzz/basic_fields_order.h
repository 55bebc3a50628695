#pragma once
// The order in which Beast's basic_fields iterates a head: a repeated name is inserted right after that name's last
// occurrence, so fields of one name (any case) are grouped where the name first came. The relay's response parser
// (proxy/response_parser.h) keeps the engine's own order instead; the tests that compare it with Beast's parser
// (tests/unit/core/proxy/response_parser_test.cpp and the upstream_response fuzz target) regroup its fields with this
// before comparing.
#include <boost/beast/core/string.hpp>
#include <string_view>
#include <utility>
#include <vector>

namespace prefixgate::fuzz {

// `fields` regrouped as basic_fields would iterate them; `name_of(field)` is a field's name.
template <class Field, class NameOf>
std::vector<Field> groupedLikeBasicFields(const std::vector<Field>& fields, NameOf name_of) {
  std::vector<Field> out;
  std::vector<bool> taken(fields.size(), false);
  for (size_t i = 0; i < fields.size(); ++i) {
    if (taken[i]) continue;
    for (size_t j = i; j < fields.size(); ++j) {
      const auto name = name_of(fields[j]), first = name_of(fields[i]);
      if (taken[j] || !boost::beast::iequals(std::string_view(name), std::string_view(first))) continue;
      taken[j] = true;
      out.push_back(fields[j]);
    }
  }
  return out;
}

}  // namespace prefixgate::fuzz
