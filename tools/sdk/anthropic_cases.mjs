// The official Anthropic TypeScript SDK (pinned in package.json) against the gateway's Messages API: create
// (streamed and not), the stream helper, countTokens and the SDK's error classes for the gateway's Anthropic-shaped
// errors. Run by tests/integration/test_sdk_conformance.py:
//   node tools/sdk/anthropic_cases.mjs --base-url http://127.0.0.1:PORT [--api-key K] [--model M] CASE...
// and prints {case: result} (see common.mjs). The SDK sends the key as x-api-key; retries are off.
import Anthropic from '@anthropic-ai/sdk';

import { describeError, expectError, parseArgs, routing, runCases } from './common.mjs';

const opts = parseArgs(process.argv.slice(2), { apiKey: 'sk-unused', model: 'sim-model' });
const client = new Anthropic({ apiKey: opts.apiKey, baseURL: opts.baseURL, maxRetries: 0, timeout: 20000 });
const model = opts.model;
const messages = [{ role: 'user', content: 'hello there' }];

const cases = {
  async messages_create() {
    const { data, response } = await client.messages
      .create({ model, max_tokens: 6, system: 'Be brief.', messages })
      .withResponse();
    return {
      id: data.id, type: data.type, role: data.role, model: data.model, content: data.content,
      stop_reason: data.stop_reason, usage: data.usage, sdk_request_id: data._request_id ?? null,
      ...routing(response.headers),
    };
  },

  // create({stream: true}), iterated as the SDK's raw stream events.
  async messages_create_stream() {
    const stream = await client.messages.create({ model, max_tokens: 5, messages, stream: true });
    const types = [];
    const deltas = [];
    let start = null;
    let messageDelta = null;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'message_start') start = event.message;
      else if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') deltas.push(event.delta.text);
      else if (event.type === 'message_delta') messageDelta = event;
    }
    return { types, deltas, text: deltas.join(''), start, message_delta: messageDelta };
  },

  // messages.stream(): the helper that accumulates events into the final message (and emits 'text').
  async messages_stream_helper() {
    const stream = client.messages.stream({ model, max_tokens: 4, messages });
    const texts = [];
    stream.on('text', (text) => texts.push(text));
    const final = await stream.finalMessage();
    return { texts, final_text: final.content.map((block) => block.text ?? '').join(''), id: final.id,
             stop_reason: final.stop_reason, usage: final.usage };
  },

  // A long streamed answer (see openai_cases.mjs: responses_stream_long): the gateway's `event: error` must reach
  // the caller as the SDK's APIError with error.type read from it.
  async messages_stream_long() {
    const stream = await client.messages.create({ model, max_tokens: 200, messages, stream: true });
    const types = [];
    try {
      for await (const event of stream) types.push(event.type);
    } catch (err) {
      return { events: types.length, last: types.at(-1) ?? null, error: describeError(err) };
    }
    return { events: types.length, last: types.at(-1) ?? null, error: null };
  },

  async count_tokens() {
    const short = await client.messages.countTokens({ model, messages });
    const long = await client.messages.countTokens({
      model, system: 'A longer system prompt.',
      messages: [{ role: 'user', content: 'a much longer question '.repeat(20) }],
    });
    return { short: short.input_tokens, long: long.input_tokens };
  },

  // A body without `messages`: the gateway's 400 invalid_request_error, as the SDK's BadRequestError.
  async error_bad_body() {
    return expectError(client.messages.create({ model, max_tokens: 5 }));
  },

  async error_unknown_model() {
    return expectError(client.messages.create({ model: 'no-such-model', max_tokens: 5, messages }));
  },

  // With API keys on and a key the gateway does not know: AuthenticationError, error.type authentication_error.
  async error_auth() {
    return expectError(client.messages.create({ model, max_tokens: 5, messages }));
  },
};

await runCases(cases, opts.cases);
