// prefixgate-engine-sim: a simulated vLLM engine pod (OpenAI API, prefix cache, vLLM metrics) for tests, the demo
// and benchmarks. Thin: parses the command line and runs the Server.
#include <CLI/CLI.hpp>
#include <boost/system/system_error.hpp>
#include <fmt/format.h>
#include <cstdio>
#include <iostream>

#include "engine_sim/server.h"
#include "engine_sim/sim_config.h"
#include "util/log.h"

namespace {

constexpr const char* kDescription =
    R"(A simulated vLLM engine pod: an OpenAI-compatible HTTP server with a simulated GPU.

Prompts are cut into "tokens" of 4 bytes (chat messages become "<|role|>content<|end|>" each, then
"<|assistant|>"); prompt blocks of --block-size tokens are cached with chained hashes in an LRU KV cache, so a
repeated prefix reports usage.prompt_tokens_details.cached_tokens and prefills faster. Prefill takes
step-overhead + uncached tokens / prefill rate, one prefill at a time; each output token takes
decode-ms-per-token + decode-ms-per-running-seq x running sequences. Output text is deterministic from the prompt.

Endpoints: POST /v1/chat/completions, /v1/completions (stream or not), /v1/embeddings, /tokenize;
GET /v1/models, /health, /metrics (vllm:* series). Idle keep-alive connections close after 5 s.
Test aids (not vLLM):
  every response carries the header "x-sim-pod: NAME";
  GET /sim/requests    the last 100 requests to /v1/* and /tokenize (not /health, /metrics, /sim/*):
                       [{"path","method","headers":{lowercased name: value},"body_bytes","model","stream","status",
                         "prompt_tokens","cached_tokens","completion_tokens","completed","cancelled"}];
                       DELETE /sim/requests empties it;
  POST /sim/fault      {"health_status": 200|503, "error_status": 0|500, "stall": bool}: /health answers
                       health_status; a non-zero error_status answers every chat/completion/embedding request with
                       that status; stall accepts those requests and never answers. GET /sim/fault shows them.
Prints "listening on HOST:PORT" once ready; exits 0 on SIGTERM/SIGINT.)";

void addFlags(CLI::App& app, prefixgate::sim::SimConfig& config) {
  app.add_option("--host", config.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", config.port, "Port to listen on; 0 picks a free one (printed when ready)")
      ->capture_default_str();
  app.add_option("--name", config.name, "Pod name, sent back in the x-sim-pod header")->capture_default_str();
  app.add_option("--model", config.models, "A model name served (repeatable); the first labels the metrics")
      ->capture_default_str();
  app.add_option("--kv-capacity-tokens", config.kv_capacity_tokens,
                 "KV cache size in tokens; it holds kv-capacity-tokens / block-size blocks")
      ->capture_default_str();
  app.add_option("--block-size", config.block_size, "Tokens per KV cache block (prefix caching granularity)")
      ->capture_default_str();
  app.add_option("--prefill-tokens-per-s", config.prefill_tokens_per_s, "Prefill rate of uncached prompt tokens")
      ->capture_default_str();
  app.add_option("--step-overhead-ms", config.step_overhead_ms, "Fixed time added to every prefill")
      ->capture_default_str();
  app.add_option("--decode-ms-per-token", config.decode_ms_per_token, "Base time of one output token")
      ->capture_default_str();
  app.add_option("--decode-ms-per-running-seq", config.decode_ms_per_running_seq,
                 "Time added to each output token per running sequence (batch cost)")
      ->capture_default_str();
  app.add_option("--max-num-seqs", config.max_num_seqs,
                 "Most sequences running at once; more requests wait in FIFO order (vllm:num_requests_waiting)")
      ->capture_default_str();
  app.add_option("--max-tokens-default", config.max_tokens_default,
                 "Output tokens when a request sets no max_tokens (finish_reason \"stop\")")
      ->capture_default_str();
  app.add_option("--max-model-len", config.max_model_len,
                 "Largest prompt + max_tokens accepted (400 beyond it), reported by /tokenize and /v1/models")
      ->capture_default_str();
  app.add_option("--time-scale", config.time_scale,
                 "Multiplies every simulated delay: 1 = real time, 0.1 = ten times faster, 0 = no delays")
      ->capture_default_str();
  app.add_option("--keep-alive-timeout-ms", config.keep_alive_timeout_ms,
                 "Idle keep-alive connections are closed after this long (vLLM: 5000)")
      ->capture_default_str();
  app.add_option("--log-level", config.log_level, "debug, info, warn, error or off (info logs one line per request)")
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace prefixgate;
  sim::SimConfig config;
  CLI::App app{kDescription, "prefixgate-engine-sim"};
  app.get_formatter()->column_width(34);
  addFlags(app, config);
  CLI11_PARSE(app, argc, argv);

  log::Level level;
  if (!log::parseLevel(config.log_level, level)) {
    std::cerr << "--log-level: unknown level '" << config.log_level << "' (debug, info, warn, error, off)\n";
    return 1;
  }
  log::setLevel(level);
  if (std::string problem = sim::validateConfig(config); !problem.empty()) {
    std::cerr << problem << "\n";
    return 1;
  }
  try {
    sim::Server server(config);
    return server.run([&](const std::string& host, uint16_t port) {
      bool v6 = host.find(':') != std::string::npos;
      std::printf("listening on %s%s%s:%u\n", v6 ? "[" : "", host.c_str(), v6 ? "]" : "", unsigned{port});
      std::fflush(stdout);
      log::info("engine-sim {}: models {}, {} KV blocks of {} tokens, time scale {}", config.name,
                fmt::join(config.models, ","), config.capacityBlocks(), config.block_size, config.time_scale);
    });
  } catch (const boost::system::system_error& e) {
    std::cerr << "prefixgate-engine-sim: " << e.what() << "\n";
    return 1;
  }
}
