// The official OpenAI Node SDK (pinned in package.json) against the gateway: the Responses API (create, streamed
// and not, the stream helper, previous_response_id, retrieve, delete, errors) and chat completions. Run by
// tests/integration/test_sdk_conformance.py:
//   node tools/sdk/openai_cases.mjs --base-url http://127.0.0.1:PORT/v1 [--api-key K] [--model M] CASE...
// and prints {case: result} (see common.mjs). Retries are off, so an error is the gateway's first answer.
import OpenAI from 'openai';

import { describeError, expectError, parseArgs, routing, runCases } from './common.mjs';

const opts = parseArgs(process.argv.slice(2), { apiKey: 'sk-unused', model: 'sim-model' });
const client = new OpenAI({ apiKey: opts.apiKey, baseURL: opts.baseURL, maxRetries: 0, timeout: 20000 });
const model = opts.model;

// The text of a Responses object the way the SDK's streaming accumulator or a raw event holds it.
const messageText = (response) =>
  (response.output ?? [])
    .filter((item) => item.type === 'message')
    .flatMap((item) => item.content.filter((part) => part.type === 'output_text').map((part) => part.text))
    .join('');

const cases = {
  // Non-streamed create: the SDK's output_text convenience (built from output[]), id, status and usage.
  async responses_create() {
    const { data, response } = await client.responses
      .create({ model, input: 'hello there', instructions: 'Be brief.', max_output_tokens: 5 })
      .withResponse();
    return {
      id: data.id, object: data.object, status: data.status, model: data.model,
      output_text: data.output_text, usage: data.usage, ...routing(response.headers),
    };
  },

  // stream: true, iterated as the SDK's typed events: their types in order, the deltas and the completed response.
  async responses_stream() {
    const stream = await client.responses.create({ model, input: 'tell me about routers', max_output_tokens: 5,
                                                   stream: true });
    const types = [];
    const deltas = [];
    const sequence = [];
    let created = null;
    let completed = null;
    let done_text = null;
    for await (const event of stream) {
      types.push(event.type);
      sequence.push(event.sequence_number);
      if (event.type === 'response.created') created = event.response;
      else if (event.type === 'response.output_text.delta') deltas.push(event.delta);
      else if (event.type === 'response.output_text.done') done_text = event.text;
      else if (event.type === 'response.completed') completed = event.response;
    }
    return {
      types, sequence, deltas, done_text,
      created_id: created?.id ?? null, created_status: created?.status ?? null,
      completed_id: completed?.id ?? null, completed_status: completed?.status ?? null,
      completed_text: completed ? messageText(completed) : null, completed_usage: completed?.usage ?? null,
    };
  },

  // The SDK's stream helper, which rebuilds the response from the events (its accumulator throws on an event for
  // an output or content part it was never told about) and hands back the final response.
  async responses_stream_helper() {
    const stream = client.responses.stream({ model, input: 'stream helper', max_output_tokens: 4 });
    const snapshots = [];
    stream.on('response.output_text.delta', (event) => snapshots.push(event.snapshot));
    const final = await stream.finalResponse();
    return { id: final.id, status: final.status, output_text: final.output_text, snapshots, usage: final.usage };
  },

  // A chain: each call continues the last by previous_response_id, and every call reaches the same pod.
  async responses_chain() {
    const turns = [];
    let previous = null;
    for (let turn = 0; turn < 3; turn++) {
      const params = { model, input: `turn ${turn}`, max_output_tokens: 3 };
      if (previous) params.previous_response_id = previous;
      const { data, response } = await client.responses.create(params).withResponse();
      turns.push({ id: data.id, status: data.status, output_text: data.output_text, ...routing(response.headers) });
      previous = data.id;
    }
    return { turns };
  },

  // retrieve, cancel and delete by id; afterwards retrieve is the SDK's NotFoundError.
  async responses_by_id() {
    const created = await client.responses.create({ model, input: 'keep me', max_output_tokens: 3 });
    const { data: got, response } = await client.responses.retrieve(created.id).withResponse();
    // cancel() of a finished (not background) response answers it as it is, from its pod.
    const { data: cancelled, response: cancelHeaders } = await client.responses.cancel(created.id).withResponse();
    // delete() is typed void; the raw answer shows what the gateway relayed.
    const deleted = await client.responses.delete(created.id).asResponse();
    const after = await expectError(client.responses.retrieve(created.id));
    return {
      id: created.id, output_text: created.output_text,
      retrieved: { id: got.id, status: got.status, output_text: got.output_text, ...routing(response.headers) },
      cancelled: { id: cancelled.id, status: cancelled.status, ...routing(cancelHeaders.headers) },
      deleted: { status: deleted.status, body: await deleted.json() },
      after,
    };
  },

  // A long streamed answer: with the gateway's upstream.max_response_bytes below its size, the stream is cut after
  // it began, and the gateway's closing error must reach the caller as the SDK's APIError, not as a silent end.
  async responses_stream_long() {
    const stream = await client.responses.create({ model, input: 'a long answer', max_output_tokens: 200,
                                                   stream: true });
    const types = [];
    let lastEvent = null;
    try {
      for await (const event of stream) {
        types.push(event.type);
        lastEvent = event;
      }
    } catch (err) {
      return { events: types.length, last: types.at(-1) ?? null, last_event: lastEvent, error: describeError(err) };
    }
    return { events: types.length, last: types.at(-1) ?? null, last_event: lastEvent, error: null };
  },

  async responses_unknown_model() {
    return expectError(client.responses.create({ model: 'no-such-model', input: 'x', max_output_tokens: 2 }));
  },

  async responses_bad_previous_id() {
    return expectError(client.responses.create({ model, input: 'x', previous_response_id: 'resp_nobody_made_this',
                                                 max_output_tokens: 2 }));
  },

  async chat_create() {
    const { data, response } = await client.chat.completions
      .create({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 })
      .withResponse();
    return { id: data.id, object: data.object, content: data.choices[0].message.content,
             finish_reason: data.choices[0].finish_reason, usage: data.usage, ...routing(response.headers) };
  },

  async chat_stream() {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, stream: true,
      stream_options: { include_usage: true },
    });
    const deltas = [];
    let finish_reason = null;
    let usage = null;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      for (const choice of chunk.choices) {
        if (choice.delta?.content) deltas.push(choice.delta.content);
        if (choice.finish_reason) finish_reason = choice.finish_reason;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    return { chunks, text: deltas.join(''), deltas: deltas.length, finish_reason, usage };
  },

  // The chat stream helper, which accumulates the chunks into one completion.
  async chat_stream_helper() {
    const stream = client.chat.completions.stream({ model, messages: [{ role: 'user', content: 'hi' }],
                                                    max_tokens: 3 });
    const final = await stream.finalChatCompletion();
    return { content: final.choices[0].message.content, finish_reason: final.choices[0].finish_reason };
  },

  async chat_unknown_model() {
    return expectError(client.chat.completions.create({ model: 'no-such-model',
                                                        messages: [{ role: 'user', content: 'x' }] }));
  },
};

await runCases(cases, opts.cases);
