// The simulator's Responses API: the chat a Responses body amounts to, the store, and the answers' shapes.
#include "engine_sim/responses_api.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace prefixgate::sim {
namespace {

using nlohmann::json;

// Ensures instructions, string and item inputs become the chat messages the engine computes.
TEST(SimResponses, BodyBecomesChat) {
  ResponseStore store;
  const ResponsesChat chat = responsesChat(
      R"({"model":"m","instructions":"Be brief.","max_output_tokens":3,"stream":true,"input":[
          {"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
          {"type":"function_call","name":"f","arguments":"{}"},
          {"type":"function_call_output","output":"42"}]})",
      store);
  ASSERT_EQ(chat.status, 0) << chat.error;
  EXPECT_EQ(chat.chat_body["model"], "m");
  EXPECT_EQ(chat.chat_body["max_tokens"], 3);
  EXPECT_EQ(chat.chat_body["stream"], true);
  const json expected = json::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"a b"},
      {"role":"assistant","content":"f {}"},{"role":"tool","content":"42"}])");
  EXPECT_EQ(chat.messages, expected);
}

// Ensures a request naming a stored response continues its conversation, and an unknown one is a 404.
TEST(SimResponses, PreviousResponseContinuesOrIsNotFound) {
  ResponseStore store;
  store.put("resp_1", StoredResponse{json::object(), json::parse(R"([{"role":"user","content":"q"},
                                                                     {"role":"assistant","content":"a"}])")});
  const ResponsesChat next = responsesChat(R"({"model":"m","previous_response_id":"resp_1","input":"q2"})", store);
  ASSERT_EQ(next.status, 0);
  ASSERT_EQ(next.messages.size(), 3u);
  EXPECT_EQ(next.messages[2]["content"], "q2");
  const ResponsesChat missing = responsesChat(R"({"model":"m","previous_response_id":"resp_2","input":"q"})", store);
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(responsesChat("{", store).status, 400);
  EXPECT_EQ(responsesChat(R"({"model":"m"})", store).status, 400);
  const json not_found = responseNotFound("resp_2");
  EXPECT_EQ(not_found["error"]["type"], "invalid_request_error");
  EXPECT_EQ(not_found["error"]["code"], 404);
}

// Ensures the store is bounded (oldest dropped first) and erases.
TEST(SimResponses, StoreBounded) {
  ResponseStore store(2);
  for (const char* id : {"r1", "r2", "r3"}) store.put(id, StoredResponse{});
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.find("r1"), nullptr);
  EXPECT_TRUE(store.erase("r2"));
  EXPECT_FALSE(store.erase("r2"));
  EXPECT_NE(store.find("r3"), nullptr);
}

// Ensures the response object and stream events have OpenAI's shapes and consecutive sequence numbers.
TEST(SimResponses, ShapesAndSequence) {
  const Usage usage{10, 2, 4};
  const json done = responseObject("resp_1", "msg_1", 5, "m", "completed", "hi", &usage);
  EXPECT_EQ(done["object"], "response");
  EXPECT_EQ(done["output"][0]["content"][0]["type"], "output_text");
  EXPECT_EQ(done["usage"]["input_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(done["usage"]["total_tokens"], 12);
  uint32_t seq = 0;
  std::string all = responseStartEvents(responseObject("resp_1", "msg_1", 5, "m", "in_progress", "", nullptr), "msg_1", seq);
  all += outputTextDeltaEvent("msg_1", "hi", seq);
  all += responseEndEvents(done, "msg_1", "hi", seq);
  EXPECT_EQ(seq, 9u);
  EXPECT_EQ(all.rfind("event: response.created\ndata: ", 0), 0u);
  EXPECT_NE(all.find("event: response.completed\n"), std::string::npos);
}

}  // namespace
}  // namespace prefixgate::sim
