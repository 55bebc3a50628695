// What the two SDK drivers share: their command line and the JSON they print. A driver runs the named cases in
// order against one gateway and prints one JSON object, {case: result}, on stdout. A case that throws is not a
// crash: its result is {"error": {...}} (the SDK's error class, status, message and, for Anthropic, error.type),
// because several cases exist to check exactly which error the SDK raises. The pytest side asserts on the JSON.

// --base-url URL (required), --api-key KEY, --model NAME, then case names.
export function parseArgs(argv, defaults) {
  const opts = { ...defaults, cases: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--base-url') opts.baseURL = argv[++i];
    else if (arg === '--api-key') opts.apiKey = argv[++i];
    else if (arg === '--model') opts.model = argv[++i];
    else if (arg.startsWith('--')) throw new Error(`unknown option ${arg}`);
    else opts.cases.push(arg);
  }
  if (!opts.baseURL) throw new Error('--base-url is required');
  return opts;
}

// The parts of a thrown SDK error the tests assert on. `type` is the Anthropic SDK's APIError.type (the
// error.type of an Anthropic-shaped body); `body` is the parsed error body the SDK kept.
export function describeError(err) {
  return {
    class: err?.constructor?.name ?? typeof err,
    status: err?.status ?? null,
    message: String(err?.message ?? err),
    type: err?.type ?? null,
    body: err?.error ?? null,
  };
}

// A call that must fail: {error: {...}} when it throws, {unexpected_success: value} when it does not.
export async function expectError(promise) {
  try {
    const value = await promise;
    return { unexpected_success: value ?? null };
  } catch (err) {
    return { error: describeError(err) };
  }
}

// Runs each named case of `cases` (name -> async () => JSON-able result) and prints {name: result}.
export async function runCases(cases, names) {
  const out = {};
  for (const name of names) {
    const run = cases[name];
    if (!run) {
      out[name] = { error: { class: 'UnknownCase', status: null, message: `no case named ${name}` } };
      continue;
    }
    try {
      out[name] = await run();
    } catch (err) {
      out[name] = { error: describeError(err) };
    }
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

// The gateway's routing headers from an SDK response, so tests can see which pod served a call.
export function routing(headers) {
  return { pod: headers.get('target-pod'), request_id: headers.get('request-id') };
}
