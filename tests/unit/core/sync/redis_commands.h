#pragma once
// What the state-sync channel tests share: the commands a channel wrote, split back into their arguments, and a bulk
// string reply to hand a channel as if Redis had sent it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sync/resp.h"

namespace prefixgate::sync::test_support {

using Args = std::vector<std::string>;

// Each command of a pipelined batch, as its arguments.
inline std::vector<Args> parse(const std::string& commands) {
  RespParser parser;
  std::vector<RedisReply> replies;
  parser.feed(commands, replies);
  EXPECT_FALSE(parser.failed()) << parser.error();
  std::vector<Args> out;
  for (const RedisReply& command : replies) {
    Args args;
    for (const RedisReply& arg : command.elements) args.push_back(arg.str);
    out.push_back(std::move(args));
  }
  return out;
}

inline RedisReply bulk(std::string s) {
  RedisReply r;
  r.type = RedisReply::Type::kBulk;
  r.str = std::move(s);
  return r;
}

}  // namespace prefixgate::sync::test_support
