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

Text is cut into "tokens" of 4 bytes; chat messages become "<|role|>content<|end|>" each, then "<|assistant|>",
with every marker one special token. The engine works like vLLM v1: it runs in steps with a token budget
(--max-num-batched-tokens), running sequences first (one decode token each, or the next prefill chunk), then
waiting ones in FIFO order while fewer than --max-num-seqs run. KV blocks of --block-size tokens are allocated as
tokens are computed; when none is free, the newest running sequence is preempted and recomputed later. Full
blocks (prompt and output) are cached under chained hashes and evicted least recently freed first, so a repeated
prefix reports usage.prompt_tokens_details.cached_tokens (whole blocks, at most prompt - 1) and prefills faster.
A step takes decode-ms-per-token + decode-ms-per-running-seq x sequences + (when it prefills) step-overhead-ms +
prefill tokens / prefill rate, plus attention over the context (docs/simulator.md). Output text is deterministic
from the prompt: one " xyz" word per token.

--kv-cache-model slots caches as llama.cpp's llama-server does instead (typically with --engine-dialect llamacpp):
--max-num-seqs slots of --kv-capacity-tokens / --max-num-seqs tokens each; a request takes the idle slot whose
tokens share the longest prefix with its prompt (more than --slot-prompt-similarity of it), else the least recently
used idle slot, and waits while none is idle; it finds cached the prefix it shares with that slot (at most
prompt - 1). --host-cache-tokens adds llama-server's host prompt cache (--cache-ram): overwritten slots are saved
there and restored when they fit a prompt better (docs/simulator.md, "The slots KV cache model").

Endpoints: POST /v1/chat/completions, /v1/completions (stream or not), /v1/embeddings, /tokenize;
GET /v1/models, /health, /metrics (vllm:* series). Idle keep-alive connections close after 5 s.
--engine-dialect sglang or llamacpp keeps the engine and speaks that engine's HTTP instead (docs/simulator.md,
"Engine dialects").
Test aids (not vLLM):
  every response carries the header "x-sim-pod: NAME";
  POST /sim/cache/match {"messages": [...]} | {"prompt": ...} | {"token_ids": [...]}: how many leading tokens of
                       that prompt the cache holds now (read only): {"cached_tokens","prompt_tokens",
                       "num_requests_running","num_requests_waiting","kv_cache_usage_perc"};
  GET /sim/requests    the last 100 requests to /v1/* and /tokenize (not /health, /metrics, /sim/*):
                       [{"path","method","headers":{lowercased name: value},"body_bytes","model","stream","status",
                         "prompt_tokens","cached_tokens","completion_tokens","completed","cancelled",
                         "kv_role_leg","kv_pulled_tokens","kv_transfer_ms"}];
                       DELETE /sim/requests empties it;
  POST /reset_prefix_cache  vLLM's: forgets every cached block (AllBlocksCleared); 409 while requests run;
  POST /sim/fault      {"health_status": 200|503, "error_status": 0|500, "stall": bool}: /health answers
                       health_status; a non-zero error_status answers every chat/completion/embedding request with
                       that status; stall accepts those requests and never answers. GET /sim/fault shows them.
  GET /sim/info        {"name","role","engine_id","engine_dialect","kv_cache_model","block_size",
                       "kv_transfer_ms_per_1k_tokens"};
Prefill/decode hand-off (vLLM's NixlConnector, docs/simulator.md "Prefill/decode roles"): a request with
kv_transfer_params {"do_remote_decode": true} answers (not streamed, finished by max_tokens) with
"kv_transfer_params": {"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids", "remote_engine_id",
"remote_request_id", "remote_host", "remote_port", "tp_size": 1}; a request carrying those back pulls the prompt's
KV its prefix cache lacks (--kv-transfer-ms-per-1k-tokens) instead of computing it.
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
  app.add_option("--kv-cache-model", config.kv_cache_model,
                 "paged: vLLM's KV blocks with prefix caching shared by all sequences; slots: llama.cpp's "
                 "llama-server, --max-num-seqs slots of kv-capacity-tokens / max-num-seqs tokens, each keeping "
                 "its last request's tokens (typically with --engine-dialect llamacpp)")
      ->capture_default_str();
  app.add_option("--slot-prompt-similarity", config.slot_prompt_similarity,
                 "slots: an idle slot is chosen by its common prefix with the prompt when that prefix is more than "
                 "this fraction of the prompt, else the least recently used idle slot (0 = always the latter)")
      ->capture_default_str();
  app.add_option("--host-cache-tokens", config.host_cache_tokens,
                 "slots: size of llama-server's host prompt cache (--cache-ram) in tokens; 0 = off")
      ->capture_default_str();
  app.add_option("--host-cache-restore-ms-per-1k-tokens", config.host_cache_restore_ms_per_1k_tokens,
                 "slots: simulated time to restore 1,000 tokens from the host cache into a slot (holds up the step)")
      ->capture_default_str();
  app.add_flag("--host-cache-idle-slots", config.host_cache_idle_slots,
               "slots: after each assignment, save every idle slot to the host cache, as llama-server's "
               "--cache-idle-slots (default on; --host-cache-idle-slots=false turns it off)");
  app.add_option("--prefill-tokens-per-s", config.prefill_tokens_per_s, "Prefill rate of uncached prompt tokens")
      ->capture_default_str();
  app.add_option("--step-overhead-ms", config.step_overhead_ms, "Time added to a step that prefills")
      ->capture_default_str();
  app.add_option("--decode-ms-per-token", config.decode_ms_per_token,
                 "Base time of every step (one pass over the weights: one output token per sequence)")
      ->capture_default_str();
  app.add_option("--decode-ms-per-running-seq", config.decode_ms_per_running_seq,
                 "Time added to a step per sequence in its batch")
      ->capture_default_str();
  app.add_option("--attention-ms-per-1k-context", config.attention_ms_per_1k_context,
                 "Time added to a step per 1,000 context tokens of its decoding sequences (KV reads)")
      ->capture_default_str();
  app.add_option("--prefill-attention-ms-per-m-pairs", config.prefill_attention_ms_per_m_pairs,
                 "Time added to a step per million (new token, context token) pairs it prefills")
      ->capture_default_str();
  app.add_option("--context-attention-ms-per-m-pairs", config.context_attention_ms_per_m_pairs,
                 "The same for the pairs of new tokens with tokens computed before the step (a cached prefix, "
                 "earlier chunks), when they cost otherwise (llama.cpp on CPU: a short prompt after a long cached "
                 "prefix); -1: as --prefill-attention-ms-per-m-pairs")
      ->capture_default_str();
  app.add_option("--context-min-rows", config.context_min_rows,
                 "A prompt chunk with fewer new tokens than this attends to its cached context at the cost of this "
                 "many (llama.cpp on CPU: a thin batch reads the cached keys and values as a wider one would; the "
                 "padding pairs cost as context pairs); 0: off")
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", config.max_num_batched_tokens,
                 "Token budget of one step (decodes first, then prefill chunks)")
      ->capture_default_str();
  app.add_option("--token-scale", config.token_scale,
                 "Each request token stands for 1/K real tokens: rates, costs and the token budget scale so that "
                 "durations stay those of the full-size workload (0 < K <= 1)")
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
  app.add_option("--kv-events", config.kv_events,
                 "Publish vLLM KV cache events on this ZMQ PUB endpoint (tcp://*:5557; port 0 = a free one, printed "
                 "as \"kv events on ENDPOINT\" before \"listening on\")");
  app.add_option("--kv-replay", config.kv_replay,
                 "Serve replay requests for the last 10,000 event messages on this ZMQ ROUTER endpoint")
      ->capture_default_str();
  app.add_option("--kv-events-encoding", config.kv_events_encoding,
                 "msgpack layout of events: array (older vLLM) or map (newer vLLM)")
      ->capture_default_str();
  app.add_option("--engine-dialect", config.engine_dialect,
                 "HTTP surface: vllm, sglang (sglang:* metrics, /tokenize and /v1/tokenize) or llamacpp (llamacpp:* "
                 "metrics, /tokenize, /apply-template, /props, /slots, timings; closes the connection after each "
                 "streamed response). The engine model is the same")
      ->capture_default_str();
  app.add_flag("--close-after-stream", config.close_after_stream,
               "Close the connection after every streamed response, without saying so in its head (default: on "
               "with --engine-dialect llamacpp, as llama-server does; --close-after-stream=false turns it off)");
  app.add_option("--shared-cpu", config.shared_cpu_file,
                 "Share CPU with every pod started with the same FILE (created if missing), as engines on one "
                 "machine's cores do: a step runs slower while others are busy, by --shared-cpu-slowdown")
      ->capture_default_str();
  app.add_option("--shared-cpu-slowdown", config.shared_cpu_slowdown,
                 "With --shared-cpu: how many times slower a busy pod computes while 1, 2, ... pods are busy "
                 "(comma-separated; beyond the list, the last value grows in proportion, as processor sharing)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_flag("--burn-cpu", config.burn_cpu,
               "Spend each step's time (x --time-scale) computing on a thread of its own instead of waiting, as an "
               "engine on CPUs does: pods, gateway and clients on one machine then slow each other down for real");
  app.add_option("--log-level", config.log_level, "debug, info, warn, error or off (info logs one line per request)")
      ->capture_default_str();
}

void addDisaggregationFlags(CLI::App& app, prefixgate::sim::SimConfig& config) {
  app.add_option("--role", config.role,
                 "prefill, decode or both: a label shown by GET /sim/info; every pod serves prefill legs "
                 "(kv_transfer_params.do_remote_decode), decode legs (do_remote_prefill) and aggregated requests, as "
                 "vLLM with NixlConnector and kv_role kv_both does. prefill and decode need the paged model and the "
                 "vllm dialect")
      ->capture_default_str();
  app.add_option("--kv-transfer-ms-per-1k-tokens", config.kv_transfer_ms_per_1k_tokens,
                 "Decode legs: simulated time to pull 1,000 prompt tokens' KV that the local prefix cache lacks "
                 "(the sequence waits; no step pays for it)")
      ->capture_default_str();
  app.add_option("--engine-id", config.engine_id,
                 "NixlConnector engine id that prefill legs return as remote_engine_id (default: --name)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace prefixgate;
  sim::SimConfig config;
  CLI::App app{kDescription, "prefixgate-engine-sim"};
  app.get_formatter()->column_width(34);
  addFlags(app, config);
  addDisaggregationFlags(app, config);
  CLI11_PARSE(app, argc, argv);
  if (app.count("--close-after-stream") == 0)
    config.close_after_stream = config.engine_dialect == "llamacpp";

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
    if (std::string events = server.kvEventsEndpoint(); !events.empty()) std::printf("kv events on %s\n", events.c_str());
    if (std::string replay = server.kvReplayEndpoint(); !replay.empty()) std::printf("kv replay on %s\n", replay.c_str());
    return server.run([&](const std::string& host, uint16_t port) {
      bool v6 = host.find(':') != std::string::npos;
      std::printf("listening on %s%s%s:%u\n", v6 ? "[" : "", host.c_str(), v6 ? "]" : "", unsigned{port});
      std::fflush(stdout);
      if (config.kvCacheModel() == sim::KvCacheModel::kSlots) {
        log::info("engine-sim {}: models {}, {} slots of {} tokens, host cache {} tokens, time scale {}, token "
                  "scale {}", config.name, fmt::join(config.models, ","), config.max_num_seqs,
                  config.slotContextTokens(), config.host_cache_tokens, config.time_scale, config.token_scale);
        return;
      }
      log::info("engine-sim {}: models {}, {} KV blocks of {} tokens, time scale {}, token scale {}", config.name,
                fmt::join(config.models, ","), config.capacityBlocks(), config.block_size, config.time_scale,
                config.token_scale);
    });
  } catch (const std::exception& e) {  // a port in use, a bad ZMQ endpoint
    std::cerr << "prefixgate-engine-sim: " << e.what() << "\n";
    return 1;
  }
}
