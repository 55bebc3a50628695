#include "engine_sim/prompt.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

bool isTokenId(const json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>() <= std::numeric_limits<uint32_t>::max();
  return value.is_number_integer() && value.get<int64_t>() >= 0 &&
         value.get<int64_t>() <= std::numeric_limits<uint32_t>::max();
}

bool isTokenIdList(const json& value) {
  if (!value.is_array() || value.empty()) return false;
  for (const auto& item : value)
    if (!isTokenId(item)) return false;
  return true;
}

void appendTokenIds(const json& list, std::vector<uint32_t>& tokens) {
  for (const auto& item : list) tokens.push_back(static_cast<uint32_t>(item.get<uint64_t>()));
}

bool appendContent(const json& content, std::string& text) {
  if (content.is_null()) return true;
  if (content.is_string()) {
    text += content.get_ref<const std::string&>();
    return true;
  }
  if (!content.is_array()) return false;
  for (const auto& part : content) {
    if (!part.is_object()) return false;
    auto it = part.find("text");
    if (it != part.end() && it->is_string()) text += it->get_ref<const std::string&>();
  }
  return true;
}

Prompt promptFromText(std::string text) {
  Prompt prompt;
  prompt.tokens = tokenize(text);
  prompt.text = std::move(text);
  return prompt;
}

}  // namespace

bool chatTemplate(const json& messages, const json* tools, bool add_generation_prompt, Prompt& prompt,
                  std::string& error) {
  if (!messages.is_array() || messages.empty()) {
    error = "'messages' must be a non-empty array";
    return false;
  }
  prompt = Prompt{};
  // A marker is one special token; the text between markers is cut into pieces on its own.
  auto marker = [&prompt](std::string_view text) {
    prompt.text += text;
    prompt.tokens.push_back(specialTokenId(text));
  };
  auto plain = [&prompt](std::string_view text) {
    prompt.text += text;
    appendTokens(text, prompt.tokens);
  };
  if (tools != nullptr && tools->is_array() && !tools->empty()) {
    marker("<|tools|>");
    plain(tools->dump());
    marker("<|end|>");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& message = messages[i];
    auto role = message.is_object() ? message.find("role") : message.end();
    if (!message.is_object() || role == message.end() || !role->is_string()) {
      error = "messages[" + std::to_string(i) + "]: 'role' must be a string";
      return false;
    }
    marker("<|" + role->get<std::string>() + "|>");
    std::string body;
    auto content = message.find("content");
    if (content != message.end() && !appendContent(*content, body)) {
      error = "messages[" + std::to_string(i) + "]: 'content' must be a string, null or an array of parts";
      return false;
    }
    auto tool_calls = message.find("tool_calls");
    if (tool_calls != message.end() && tool_calls->is_array()) body += tool_calls->dump();
    plain(body);
    marker("<|end|>");
  }
  if (add_generation_prompt) marker(kGenerationPrompt);
  return true;
}

PromptResult chatPrompt(const json& body, bool add_generation_prompt) {
  PromptResult result;
  if (!body.is_object()) {
    result.error = "the request body must be a JSON object";
    return result;
  }
  auto messages = body.find("messages");
  if (messages == body.end()) {
    result.error = "'messages' is required";
    return result;
  }
  auto tools = body.find("tools");
  chatTemplate(*messages, tools == body.end() ? nullptr : &*tools, add_generation_prompt, result.prompt,
               result.error);
  return result;
}

PromptResult completionPrompt(const json& body) {
  PromptResult result;
  auto prompt = body.is_object() ? body.find("prompt") : body.end();
  if (!body.is_object() || prompt == body.end()) {
    result.error = "'prompt' is required";
    return result;
  }
  if (prompt->is_string()) {
    result.prompt = promptFromText(prompt->get<std::string>());
  } else if (isTokenIdList(*prompt)) {
    appendTokenIds(*prompt, result.prompt.tokens);
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_string()) {
    std::string text;
    for (const auto& item : *prompt) {
      if (!item.is_string()) {
        result.error = "'prompt' must be a string, a list of strings or a list of token ids";
        return result;
      }
      text += item.get_ref<const std::string&>();
    }
    result.prompt = promptFromText(std::move(text));
  } else if (prompt->is_array() && !prompt->empty()) {
    for (const auto& item : *prompt) {
      if (!isTokenIdList(item)) {
        result.error = "'prompt' must be a string, a list of strings or a list of token ids";
        return result;
      }
      appendTokenIds(item, result.prompt.tokens);
    }
  } else {
    result.error = "'prompt' must be a string, a list of strings or a list of token ids";
    return result;
  }
  if (result.prompt.tokens.empty()) result.error = "'prompt' must not be empty";
  return result;
}

namespace {

// llama-server tokenizes the text of a prompt with a BOS token first and special markers parsed.
PromptResult llamacppTokens(PromptResult result) {
  if (result.ok() && !result.prompt.text.empty())
    result.prompt.tokens = tokenizeSpecial(result.prompt.text, true, true);
  return result;
}

}  // namespace

PromptResult chatPrompt(const json& body, bool add_generation_prompt, EngineDialect dialect) {
  PromptResult result = chatPrompt(body, add_generation_prompt);
  return dialect == EngineDialect::kLlamacpp ? llamacppTokens(std::move(result)) : result;
}

PromptResult completionPrompt(const json& body, EngineDialect dialect) {
  PromptResult result = completionPrompt(body);
  return dialect == EngineDialect::kLlamacpp ? llamacppTokens(std::move(result)) : result;
}

bool llamacppAddGenerationPrompt(const json& body) {
  auto it = body.is_object() ? body.find("add_generation_prompt") : body.end();
  return it != body.end() && it->is_boolean() ? it->get<bool>() : true;
}

PromptsResult embeddingInputs(const json& body) {
  PromptsResult result;
  auto input = body.is_object() ? body.find("input") : body.end();
  if (!body.is_object() || input == body.end()) {
    result.error = "'input' is required";
    return result;
  }
  const char* shape = "'input' must be a string, a list of strings, token ids or a list of token id lists";
  if (input->is_string()) {
    result.prompts.push_back(promptFromText(input->get<std::string>()));
  } else if (isTokenIdList(*input)) {
    result.prompts.emplace_back();
    appendTokenIds(*input, result.prompts.back().tokens);
  } else if (input->is_array() && !input->empty()) {
    for (const auto& item : *input) {
      if (item.is_string()) {
        result.prompts.push_back(promptFromText(item.get<std::string>()));
      } else if (isTokenIdList(item)) {
        result.prompts.emplace_back();
        appendTokenIds(item, result.prompts.back().tokens);
      } else {
        result.error = shape;
        return result;
      }
    }
  } else {
    result.error = shape;
    return result;
  }
  for (const auto& prompt : result.prompts)
    if (prompt.tokens.empty()) result.error = "'input' must not contain an empty input";
  return result;
}

}  // namespace prefixgate::sim
